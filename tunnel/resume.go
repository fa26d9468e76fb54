package tunnel

// Intercepted connections resume TLS sessions (docs/behaviour.md §5.2).
// Every intercepted connection gets a tls.Config of its own (its leaf is
// the CONNECT target's), and crypto/tls gives each Config ticket keys of
// its own, so the tickets one connection handed out could never be
// redeemed on the next: a client that keeps its sessions (curl and
// OpenSSL across the connections of one process, a Go client given a
// session cache) paid a full handshake on every new connection,
// certificate chain check included, for a ticket the proxy had spent time
// sealing.
// Here one set of keys seals the tickets of every connection, and each
// ticket is bound to the CONNECT target it was issued in.

import (
	"bytes"
	"crypto/tls"
)

// ticketBinding prefixes the Extra entry naming a session's CONNECT
// target; SessionState.Extra is shared by every layer that keeps data in
// a session, so entries carry an id and a version.
const ticketBinding = "nora-breaker/connect-target/1 "

// sessionTickets seals and opens the session tickets of intercepted
// connections with the keys of one Config that serves no connection
// itself: crypto/tls generates them when first asked, rotates them daily
// and accepts each for a week, as it does for any server. The keys live in
// memory only and die with the process, as the CA they stand beside does
// not change without a restart. The zero value is ready to use.
type sessionTickets struct{ keys tls.Config }

// bind makes conf's tickets the shared keys', each resumable only in a
// tunnel to target ("host:port", as the CONNECT named it). A ticket for
// another target, or one the keys cannot open, is ignored: the client gets
// a full handshake, never an error.
func (st *sessionTickets) bind(conf *tls.Config, target string) {
	entry := []byte(ticketBinding + target)
	conf.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		ss.Extra = append(ss.Extra, entry)
		return st.keys.EncryptTicket(cs, ss)
	}
	conf.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		ss, err := st.keys.DecryptTicket(identity, cs)
		if err != nil || ss == nil {
			return nil, err
		}
		for _, e := range ss.Extra {
			if bytes.Equal(e, entry) {
				return ss, nil
			}
		}
		return nil, nil
	}
}
