package dial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/nora-breaker/nora-breaker/internal/hostport"
)

// x/net's http2.Transport and ClientConn are deprecated in favour of
// net/http's ClientConn (Go 1.26), which could carry this pool too (dialled
// through the transport's DialTLSContext to learn each connection's
// certificate and address); until that move, x/net's is the one in use.
//
//lint:file-ignore SA1019 the pool is built on x/net's HTTP/2 client connections (see above)

// errHTTP1 is what the shared pool answers for a host whose server chose
// HTTP/1.1 when it was dialled: net/http's own transport serves that host.
var errHTTP1 = errors.New("the upstream chose HTTP/1.1")

// errRetired is what the pool of a transport a reload replaced answers
// instead of dialling: net/http's transport serves the stragglers.
var errRetired = errors.New("the transport was retired")

// Bounds on what the pool remembers per host name, so a proxy that meets
// an unbounded stream of names keeps a bounded memory of them.
const (
	maxHTTP1Hosts = 4096 // hosts known to speak HTTP/1.1 only
	maxRefusals   = 256  // per connection: names its certificate does not cover
)

// h2Share carries the direct https requests over HTTP/2 connections that
// more than one host name may share (RFC 9113 §9.1.1): a request for a
// host with no connection of its own goes on an existing connection when
// the host resolves, as the dialer would resolve it, to the address that
// connection was dialled to, the destination policy allows the host there,
// and the certificate that connection's server presented verifies for the
// host against the same roots. Everything is checked on the connection
// itself, never on what an earlier connection to that address presented.
// Interception makes this matter: every alias host of one registry is a
// new host name, and without sharing each paid a TCP, TLS and HTTP/2
// set-up of its own.
//
// It is the http2.Transport's ClientConnPool: it dials the connections
// itself (the Dialer, then TLS offering h2 and http/1.1), and a server that
// picks HTTP/1.1 is remembered and left to net/http's transport.
type h2Share struct {
	t2        *http2.Transport
	dialer    *Dialer
	tlsConf   *tls.Config
	roots     *x509.CertPool
	handshake time.Duration
	// maxConns bounds the connections dialled for one host, open or
	// being dialled (0: no bound), as max_upstream_conns_per_host does
	// for net/http's transport.
	maxConns int
	now      func() time.Time

	mu sync.Mutex
	// byKey are the connections a "host:port" may use: those dialled
	// for it, then those it was found to share.
	byKey   map[string][]*h2Conn
	conns   map[*http2.ClientConn]*h2Conn
	dialing map[string]*h2Dial
	http1   map[string]bool
	retired bool
}

// h2Conn is one HTTP/2 connection and what sharing it is judged by.
type h2Conn struct {
	cc  *http2.ClientConn
	key string // the "host:port" it was dialled for
	// addr is where it was dialled: another host shares it only if it
	// resolves there.
	addr          netip.AddrPort
	leaf          *x509.Certificate
	intermediates *x509.CertPool
	// keys are the "host:port" it is listed under in byKey (its own
	// first); refused are the hosts its certificate does not cover.
	// Both under h2Share.mu.
	keys    []string
	refused map[string]bool
}

// h2Dial is a dial in flight for one key; the requests that find it wait
// for it instead of dialling their own.
type h2Dial struct {
	done chan struct{}
	err  error
}

// h2Pick is how a request learns which connection the pool gave it: set
// in its context before the round trip, filled by GetClientConn.
type h2Pick struct {
	conn   *h2Conn
	shared bool // the connection was dialled for another host
	// own asks for a connection dialled for this host alone: the retry
	// of a request a shared connection's server answered 421.
	own bool
}

type h2PickKey struct{}

func newH2Share(s Settings, tlsConf *tls.Config, d *Dialer) *h2Share {
	p := &h2Share{dialer: d, tlsConf: tlsConf, roots: tlsConf.RootCAs, handshake: s.tlsHandshakeTimeout,
		maxConns: s.maxConnsPerHost, now: time.Now, byKey: map[string][]*h2Conn{},
		conns: map[*http2.ClientConn]*h2Conn{}, dialing: map[string]*h2Dial{}, http1: map[string]bool{}}
	// The settings of newHTTPTransport, in x/net's words.
	// Strict: a request given a connection whose streams are all taken
	// waits there for one (at the bound), rather than failing and being
	// retried with back-off; the pool itself dials another connection
	// while under the bound (room).
	p.t2 = expectingTransport()
	p.t2.ConnPool = p
	p.t2.DisableCompression = true
	p.t2.MaxHeaderListSize = 1 << 20
	p.t2.IdleConnTimeout = 90 * time.Second
	p.t2.ReadIdleTimeout = 10 * time.Second
	p.t2.PingTimeout = 5 * time.Second
	p.t2.StrictMaxConcurrentStreams = true
	return p
}

// expectingTransport is an http2.Transport that honours Expect:
// 100-continue as net/http's transport does: the request body waits up to
// expectContinueTimeout for the server's 100, so a server that answers
// first (a 401 to an upload) is never sent the body, and the client is
// never told to send it. x/net reads that timeout only from the net/http
// transport it was configured from; the one made here serves for nothing
// else (its pool and protocol table are never used).
func expectingTransport() *http2.Transport {
	t2, err := http2.ConfigureTransports(&http.Transport{ExpectContinueTimeout: expectContinueTimeout})
	if err != nil {
		// Only a transport that already has an "https" protocol
		// registered is refused, and this one is new.
		panic("dial: configuring x/net's HTTP/2 transport: " + err.Error())
	}
	return t2
}

// takes reports whether req goes through the pool: an https request that
// does not ask to switch protocols (a websocket handshake is HTTP/1.1's),
// for a host not known to speak HTTP/1.1 only.
func (p *h2Share) takes(req *http.Request) bool {
	if req.URL.Scheme != "https" || req.Header.Get("Upgrade") != "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.retired && !p.http1[keyOf(req)]
}

// keyOf is the "host:port" req is for, in canonical form.
func keyOf(req *http.Request) string {
	host, port := hostport.Of(req.URL)
	return hostport.Join(host, port)
}

// RoundTrip sends req over an HTTP/2 connection of the pool; errHTTP1 when
// its server turned out to speak HTTP/1.1 only. A server that answers 421
// (Misdirected Request) on a connection dialled for another host said it
// does not serve this host there: the request is sent again, when its body
// can be, on a connection of its own, and the shared one is not used for
// the host again.
func (p *h2Share) RoundTrip(req *http.Request) (*http.Response, error) {
	pick := &h2Pick{}
	resp, err := p.t2.RoundTrip(req.WithContext(context.WithValue(req.Context(), h2PickKey{}, pick)))
	if pick.conn != nil && (errors.Is(err, errHTTP1) || errors.Is(err, errRetired)) {
		// x/net's retry of a request a connection failed under: its
		// body may be spent, so it cannot start again on net/http's
		// transport.
		var hc *http1Chosen
		if errors.As(err, &hc) {
			hc.h.drop()
		}
		return nil, fmt.Errorf("retrying on a new connection: %v", err)
	}
	if err != nil || resp.StatusCode != http.StatusMisdirectedRequest || !pick.shared {
		return resp, err
	}
	p.refuse(pick.conn, keyOf(req))
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return resp, nil
		}
		body, err := req.GetBody()
		if err != nil {
			return resp, nil
		}
		req = req.Clone(req.Context())
		req.Body = body
	}
	resp.Body.Close()
	again := &h2Pick{own: true}
	return p.t2.RoundTrip(req.WithContext(context.WithValue(req.Context(), h2PickKey{}, again)))
}

// GetClientConn is the connection req goes on: one of its host's that can
// take another stream; else one it may share; else the one being dialled
// for its host, or a new one. addr, x/net's form of the authority, is not
// used: the pool keys by the canonical host.
func (p *h2Share) GetClientConn(req *http.Request, _ string) (*http2.ClientConn, error) {
	pick, _ := req.Context().Value(h2PickKey{}).(*h2Pick)
	if pick == nil {
		pick = &h2Pick{}
	}
	host, port := hostport.Of(req.URL)
	key := hostport.Join(host, port)
	for {
		p.mu.Lock()
		if c := p.ownLocked(key, pick.own); c != nil {
			p.mu.Unlock()
			pick.conn, pick.shared = c, c.key != key
			return c.cc, nil
		}
		var others []*h2Conn
		if !pick.own {
			others = p.othersLocked(key, port)
		}
		p.mu.Unlock()
		if c := p.share(req.Context(), host, port, key, others); c != nil {
			pick.conn, pick.shared = c, true
			return c.cc, nil
		}
		p.mu.Lock()
		d := p.dialing[key]
		if d == nil {
			if c := p.fullLocked(key); c != nil {
				// At the bound: the request waits on an open connection
				// for a stream to free up, as net/http's waits for a
				// connection.
				p.mu.Unlock()
				pick.conn, pick.shared = c, false
				return c.cc, nil
			}
			if p.retired {
				p.mu.Unlock()
				return nil, errRetired
			}
			d = &h2Dial{done: make(chan struct{})}
			p.dialing[key] = d
			go p.runDial(req.Context(), host, port, key, d)
		}
		p.mu.Unlock()
		select {
		case <-d.done:
		case <-req.Context().Done():
			return nil, context.Cause(req.Context())
		}
		if d.err != nil {
			return nil, d.err
		}
	}
}

// runDial dials key for d and lists the connection under key, or
// remembers a key whose server chose HTTP/1.1. Like net/http's, the dial
// goes on when the request that started it is cancelled (others may be
// waiting for it, and it is kept for later); the dial and handshake
// timeouts bound it.
func (p *h2Share) runDial(ctx context.Context, host, port, key string, d *h2Dial) {
	c, err := p.dial(context.WithoutCancel(ctx), host, port)
	p.mu.Lock()
	delete(p.dialing, key)
	d.err = err
	switch {
	case err == nil && p.retired:
		go c.cc.Shutdown(context.Background())
		d.err = errRetired
	case err == nil:
		c.keys = []string{key}
		p.byKey[key] = append(p.byKey[key], c)
		p.conns[c.cc] = c
	case errors.Is(err, errHTTP1):
		if len(p.http1) >= maxHTTP1Hosts {
			clear(p.http1)
		}
		p.http1[key] = true
	}
	p.mu.Unlock()
	close(d.done)
}

// ownLocked is a connection listed under key with a stream free; with
// dialled, only one dialled for key.
//
// No stream is reserved (ReserveNewRequest): under
// StrictMaxConcurrentStreams x/net counts reservations against the
// server's limit while a request waits for a stream, so reservations
// beyond it would wait on each other forever. A connection given without
// one that closes before the request starts on it fails the request with
// an error x/net retries, asking the pool again.
func (p *h2Share) ownLocked(key string, dialled bool) *h2Conn {
	for _, c := range p.byKey[key] {
		if (!dialled || c.key == key) && c.room() {
			return c
		}
	}
	return nil
}

// room reports whether c is open and has a stream free: the server's
// SETTINGS_MAX_CONCURRENT_STREAMS, or before its SETTINGS arrive the 100
// x/net assumes, not all taken.
func (c *h2Conn) room() bool {
	st := c.cc.State()
	limit := int(st.MaxConcurrentStreams)
	if limit == 0 {
		limit = 100
	}
	return !st.Closed && !st.Closing && st.StreamsActive+st.StreamsReserved+st.StreamsPending < limit
}

// fullLocked is, when key already has as many connections as maxConns
// allows, the one of them with the fewest streams; nil while another may
// be dialled.
func (p *h2Share) fullLocked(key string) *h2Conn {
	if p.maxConns <= 0 {
		return nil
	}
	var least *h2Conn
	n, fewest := 0, 0
	for _, c := range p.byKey[key] {
		st := c.cc.State()
		if c.key != key || st.Closing || st.Closed {
			continue
		}
		n++
		if busy := st.StreamsActive + st.StreamsReserved + st.StreamsPending; least == nil || busy < fewest {
			least, fewest = c, busy
		}
	}
	if n < p.maxConns {
		return nil
	}
	return least
}

// othersLocked are the open connections dialled for other hosts on the
// same port, not yet listed under key (ownLocked tried those) nor known
// not to cover key's host: the candidates for sharing.
func (p *h2Share) othersLocked(key, port string) []*h2Conn {
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil
	}
	var out []*h2Conn
	for _, c := range p.conns {
		if c.key == key || c.refused[key] || c.addr.Port() != uint16(pn) || slices.Contains(c.keys, key) {
			continue
		}
		if c.room() {
			out = append(out, c)
		}
	}
	return out
}

// share is the first of others that host may use, listed under key from
// now on; nil for none. The certificate is
// checked first, as it costs no round trip; host is resolved only when
// some certificate covers it.
func (p *h2Share) share(ctx context.Context, host, port, key string, others []*h2Conn) *h2Conn {
	var covering []*h2Conn
	for _, c := range others {
		if c.covers(host, p.roots, p.now()) {
			covering = append(covering, c)
			continue
		}
		p.refuse(c, key)
	}
	if len(covering) == 0 {
		return nil
	}
	addrs, err := p.dialer.addrsOf(ctx, host, port)
	if err != nil {
		return nil
	}
	for _, c := range covering {
		if !slices.Contains(addrs, c.addr) || p.dialer.policy.CheckDial(host, port, c.addr) != nil {
			continue
		}
		p.mu.Lock()
		_, open := p.conns[c.cc]
		if open && !c.refused[key] && c.room() {
			c.keys = append(c.keys, key)
			p.byKey[key] = append(p.byKey[key], c)
			p.mu.Unlock()
			return c
		}
		p.mu.Unlock()
	}
	return nil
}

// covers reports whether the certificate c's server presented verifies
// for host, as crypto/tls verified it for the host it was dialled for:
// the same roots, the intermediates that server sent, the time now.
func (c *h2Conn) covers(host string, roots *x509.CertPool, now time.Time) bool {
	if c.leaf.VerifyHostname(host) != nil {
		// The cheap test first: most certificates met do not name host.
		return false
	}
	_, err := c.leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, Intermediates: c.intermediates,
		CurrentTime: now})
	return err == nil
}

// refuse takes c off key's list and remembers that key's host is not to
// use it (its certificate does not cover the host, or its server answered
// 421 for it).
func (p *h2Share) refuse(c *h2Conn, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.refused == nil {
		c.refused = map[string]bool{}
	}
	if len(c.refused) < maxRefusals {
		c.refused[key] = true
	}
	p.unlistLocked(c, key)
}

// unlistLocked takes c off key's list.
func (p *h2Share) unlistLocked(c *h2Conn, key string) {
	list := p.byKey[key]
	for i, o := range list {
		if o == c {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(p.byKey, key)
	} else {
		p.byKey[key] = list
	}
	for i, k := range c.keys {
		if k == key {
			c.keys = append(c.keys[:i:i], c.keys[i+1:]...)
			break
		}
	}
}

// dial opens a new HTTP/2 connection for host:port, or answers the
// connection a server that chose HTTP/1.1 picked it on, to hand over.
func (p *h2Share) dial(ctx context.Context, host, port string) (*h2Conn, error) {
	tc, err := p.dialTLSConn(ctx, host, port, []string{http2.NextProtoTLS, "http/1.1"})
	if err != nil {
		return nil, err
	}
	st := tc.ConnectionState()
	if st.NegotiatedProtocol != http2.NextProtoTLS {
		return nil, &http1Chosen{h: &handOver{key: hostport.Join(host, port), conn: tc}}
	}
	addr := netip.AddrPort{}
	if ta, ok := tc.RemoteAddr().(*net.TCPAddr); ok {
		addr = ta.AddrPort()
		addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	}
	inter := x509.NewCertPool()
	for _, ic := range st.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	cc, err := p.t2.NewClientConn(tc)
	if err != nil {
		tc.Close()
		return nil, err
	}
	return &h2Conn{cc: cc, addr: addr, leaf: st.PeerCertificates[0], intermediates: inter,
		key: hostport.Join(host, port)}, nil
}

// handshakeWithin does tc's handshake within tls_handshake_timeout, and
// says a handshake that ran out of it the way net/http's transport does:
// a timeout, never the context's own error.
func (p *h2Share) handshakeWithin(ctx context.Context, tc *tls.Conn) error {
	if p.handshake <= 0 {
		return tc.HandshakeContext(ctx)
	}
	hctx, cancel := context.WithTimeout(ctx, p.handshake)
	defer cancel()
	err := tc.HandshakeContext(hctx)
	if err != nil && hctx.Err() != nil {
		return handshakeTimeout{}
	}
	return err
}

// handshakeTimeout is a TLS handshake that took longer than
// tls_handshake_timeout: a net.Error whose Timeout is true.
type handshakeTimeout struct{}

func (handshakeTimeout) Error() string   { return "TLS handshake timeout" }
func (handshakeTimeout) Timeout() bool   { return true }
func (handshakeTimeout) Temporary() bool { return true }

// MarkDead forgets cc: x/net calls it when the connection closes.
func (p *h2Share) MarkDead(cc *http2.ClientConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.conns[cc]
	if c == nil {
		return
	}
	delete(p.conns, cc)
	for _, k := range append([]string(nil), c.keys...) {
		p.unlistLocked(c, k)
	}
}

// closeIdle closes the connections no request is using; with retire, it
// closes every connection once its requests finish and dials none again.
func (p *h2Share) closeIdle(retire bool) {
	p.mu.Lock()
	if retire {
		p.retired = true
	}
	var shut []*http2.ClientConn
	for cc := range p.conns {
		st := cc.State()
		if retire || st.StreamsActive+st.StreamsReserved+st.StreamsPending == 0 {
			shut = append(shut, cc)
		}
	}
	p.mu.Unlock()
	for _, cc := range shut {
		// Shutdown sends GOAWAY and closes once the open streams end; a
		// request that took the connection meanwhile is retried on
		// another by x/net.
		go cc.Shutdown(context.Background())
	}
}
