package dial

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// TestNameServerOutageIsNotTheUpstreams: a lookup that fails because
// nothing answers at the name server's address (the node's DNS cache is
// down: the query is refused by the host, ECONNREFUSED) says nothing about
// the upstream whose name was asked, and every upstream of the proxy would
// fail it at once; with shared_state one such proxy would open the fleet's
// breakers. It is neutral and counted as this machine's. A name server's
// own answer that the name does not exist is the truth about that name (a
// wrong host in the configuration, the upstream's zone gone), and stays a
// failure. The name servers are the test's, on 127.0.0.1.
func TestNameServerOutageIsNotTheUpstreams(t *testing.T) {
	for _, c := range []struct {
		name   string
		server func(t *testing.T) string
		want   breakerstate.Outcome
	}{
		{"nothing listens at the name server", closedUDPPort, breakerstate.Neutral},
		{"the name server says no such name", nxdomainServer, breakerstate.Failure},
	} {
		t.Run(c.name, func(t *testing.T) {
			server := c.server(t)
			var nd net.Dialer
			d := &Dialer{timeout: time.Second, dnsDial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return nd.DialContext(ctx, network, server)
			}}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, dialErr := d.DialContext(ctx, "tcp", "registry.nora-breaker.test:443")
			_, lookupErr := d.addrsOf(ctx, "registry.nora-breaker.test", "443")
			for what, err := range map[string]error{"dial": dialErr, "lookup": lookupErr} {
				var dnsErr *net.DNSError
				if !errors.As(err, &dnsErr) {
					t.Fatalf("%s: %v, want the lookup's own error", what, err)
				}
				if got := attempt.Decide(nil, err, context.Background()); got != c.want {
					t.Errorf("%s: %v: verdict %v (local fault %v), want %v", what, err, got, attempt.LocalFault(err), c.want)
				}
			}
		})
	}
}

// closedUDPPort is a loopback address nothing listens on: a query sent
// there is answered by the host with port unreachable.
func closedUDPPort(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// nxdomainServer is a name server on 127.0.0.1 that answers every query
// with NXDOMAIN (over UDP; Go's resolver asks over TCP only after a
// truncated answer).
func nxdomainServer(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if reply := nxdomain(buf[:n]); reply != nil {
				pc.WriteTo(reply, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// nxdomain is the NXDOMAIN answer to query: its ID and question, no
// records (the query's EDNS record left out), or nil for a query it cannot
// read.
func nxdomain(query []byte) []byte {
	if len(query) < 12 {
		return nil
	}
	end := 12
	for end < len(query) && query[end] != 0 {
		end += 1 + int(query[end])
	}
	end += 1 + 4 // the root label, then type and class
	if end > len(query) {
		return nil
	}
	reply := append([]byte{}, query[:end]...)
	reply[2], reply[3] = 0x81|query[2]&0x01, 0x83 // QR, RD copied; RA, rcode 3
	reply[4], reply[5] = 0, 1                     // one question
	for i := 6; i < 12; i++ {
		reply[i] = 0 // no answers, authorities or additional records
	}
	return reply
}
