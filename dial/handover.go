package dial

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/nora-breaker/nora-breaker/internal/hostport"
)

// handOver is a TLS connection the shared pool dialled whose server chose
// HTTP/1.1: instead of closing it and dialling again, the pool hands it to
// net/http's transport, whose first dial for that host takes it (so an
// HTTP/1.1 upstream costs the connections it did before the pool). Whoever
// comes first, that dial or drop, wins; drop closes a connection no dial
// took.
type handOver struct {
	key  string // "host:port", canonical
	conn net.Conn
	// state: 0 waiting, 1 taken by a dial, 2 dropped.
	state atomic.Int32
}

// take is the connection for key, once, or nil.
func (h *handOver) take(key string) net.Conn {
	if h.key == key && h.state.CompareAndSwap(0, 1) {
		return h.conn
	}
	return nil
}

// drop closes the connection unless a dial took it.
func (h *handOver) drop() {
	if h.state.CompareAndSwap(0, 2) {
		h.conn.Close()
	}
}

// http1Chosen is the pool's answer for a host whose server picked
// HTTP/1.1, with the connection it picked it on: errors.Is finds errHTTP1.
type http1Chosen struct{ h *handOver }

func (e *http1Chosen) Error() string        { return errHTTP1.Error() }
func (e *http1Chosen) Is(target error) bool { return target == errHTTP1 }

// handOverKey carries a *handOver in the context of the request it was
// dialled for; onlyHTTP1Key marks a request that must not get HTTP/2 (it
// asks to switch protocols).
type (
	handOverKey  struct{}
	onlyHTTP1Key struct{}
)

// viaHTTP1 is req for net/http's transport: with the connection the pool
// handed over, if any, and marked when it asks to switch protocols.
func viaHTTP1(req *http.Request, h *handOver) *http.Request {
	ctx := req.Context()
	if h != nil {
		ctx = context.WithValue(ctx, handOverKey{}, h)
	}
	if req.Header.Get("Upgrade") != "" {
		ctx = context.WithValue(ctx, onlyHTTP1Key{}, true)
	}
	if ctx == req.Context() {
		return req
	}
	return req.WithContext(ctx)
}

// dialTLS is net/http's direct transport's TLS dial: the connection the
// pool handed over for this host, else a new one, verified for the host,
// offering h2 (net/http's bundled HTTP/2 takes it) unless the request asks
// to switch protocols.
func (p *h2Share) dialTLS(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := hostport.Split(addr, "443")
	if err != nil {
		return nil, err
	}
	if h, ok := ctx.Value(handOverKey{}).(*handOver); ok {
		if c := h.take(hostport.Join(host, port)); c != nil {
			return c, nil
		}
	}
	protos := []string{"h2", "http/1.1"}
	if only, _ := ctx.Value(onlyHTTP1Key{}).(bool); only {
		protos = []string{"http/1.1"}
	}
	return p.dialTLSConn(ctx, host, port, protos)
}

// dialTLSConn dials host:port with the Dialer (resolve map, destination
// policy) and does the TLS handshake, verified for host, offering protos.
func (p *h2Share) dialTLSConn(ctx context.Context, host, port string, protos []string) (*tls.Conn, error) {
	raw, err := p.dialer.DialContext(ctx, "tcp", hostport.Join(host, port))
	if err != nil {
		return nil, err
	}
	conf := p.tlsConf.Clone()
	conf.ServerName = host
	conf.NextProtos = protos
	tc := tls.Client(raw, conf)
	if err := p.handshakeWithin(ctx, tc); err != nil {
		raw.Close()
		return nil, err
	}
	return tc, nil
}
