package tunnel

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/certs"
	"github.com/nora-breaker/nora-breaker/clientconn"
	"github.com/nora-breaker/nora-breaker/relay"
)

// Intercepted connections are served here rather than by goproxy's MITM
// loop: goproxy reads the requests inside a hijacked connection itself, with
// no limit on the size of a request head and no timeout for it, and the
// listener's MaxHeaderBytes and ReadHeaderTimeout do not reach a hijacked
// connection. An http.Server of our own, serving just the one connection,
// puts the same limits on what arrives inside the tunnel as on the plain
// port, speaks HTTP/2 when ALPN picks it, and refuses an ambiguous
// Content-Length + Transfer-Encoding head as the plain port does.

// maxStreamsPerClientConn bounds the concurrent HTTP/2 streams of one
// intercepted client connection: 100, the least RFC 9113 recommends
// offering, and never more than the upstream connections one host may
// have, since with an HTTP/1 upstream each stream needs one of those. A
// client past the bound waits for a stream; one that resets streams faster
// than they finish is sent away by net/http once too many are queued.
const maxStreamsPerClientConn = 100

// StreamsPerConn is the HTTP/2 stream bound for a configuration whose
// upstream connections per host are capped at maxUpstreamConnsPerHost.
func StreamsPerConn(maxUpstreamConnsPerHost int) int {
	return max(1, min(maxStreamsPerClientConn, maxUpstreamConnsPerHost))
}

// Handler answers one request from inside a tunnel to target; it always
// returns an answer.
type Handler func(req *http.Request, target Target) *http.Response

// Interceptor terminates TLS for intercepted CONNECTs and serves the
// requests inside. One serves the whole process.
type Interceptor struct {
	CA     *tls.Certificate
	Leaves *certs.Store
	// Idle is the client connections' idle timeout (a restart setting).
	Idle   time.Duration
	Handle Handler
	Bufs   *relay.Buffers
	Logger zerolog.Logger
	// ErrorLog takes net/http's own complaints about the inner connections.
	ErrorLog *log.Logger
	// Drainers is where every intercepted connection is registered, so a
	// shutdown drains it: the request in flight finishes (HTTP/2: GOAWAY,
	// the open streams finish), then the connection closes.
	Drainers *clientconn.Drainers
	// OnHandshake, when set, is told of every completed TLS handshake with
	// a client, and whether it resumed a session (resume.go).
	OnHandshake func(resumed bool)

	// tickets is the one set of ticket keys of every connection served.
	tickets sessionTickets
}

// serverDrainer drains an intercepted connection through its own server.
// On HTTP/1.1 keep-alives end: the request in flight is answered with
// Connection: close, an idle connection closes at once, and so does one
// that was handed over during the drain (its handshake ended after the
// shutdown began) once the request it came for is answered — net/http's
// Shutdown would drop that request unanswered. A connection that has sent
// no request yet is closed once it is 5 s old, as Shutdown closes one on
// the plain port: SetKeepAlivesEnabled(false) applies that rule each time
// it is called, so clientconn.EndKeepAlives calls it again and again;
// called once, such a connection held the drain for its whole header
// timeout. On HTTP/2 the
// server shuts down (GOAWAY: the open streams finish), once it counts the
// connection: Shutdown before that would make Serve refuse it.
type serverDrainer struct {
	srv *http.Server
	ln  *oneConnListener
	h2  bool
}

func (d serverDrainer) Drain(ctx context.Context) {
	if !d.h2 {
		clientconn.EndKeepAlives(ctx, d.srv, nil) // until the connection's end, or the grace's
		return
	}
	select {
	case <-d.ln.serving:
	case <-ctx.Done():
		return
	}
	_ = d.srv.Shutdown(ctx)
}

func (d serverDrainer) Close() error { return d.srv.Close() }

// Conn is one accepted intercepted CONNECT.
type Conn struct {
	// Req is the CONNECT request, Client the hijacked connection.
	Req    *http.Request
	Client net.Conn
	Target Target
	// HandshakeTimeout bounds the client's TLS handshake (tls_handshake_timeout).
	HandshakeTimeout time.Duration
	// Streams bounds the concurrent HTTP/2 streams (StreamsPerConn).
	Streams int
}

// Serve confirms the CONNECT, terminates TLS with a leaf for the target
// and serves the requests inside until the client leaves or the
// connection idles out. It returns when the connection is closed.
func (ic *Interceptor) Serve(c Conn) {
	client := c.Client
	defer func() {
		if v := recover(); v != nil {
			ic.Logger.Error().Str("panic", fmt.Sprint(v)).Str("host", c.Target.Addr()).Msg("intercept panic recovered")
			_ = client.Close()
		}
	}()
	if _, err := io.WriteString(client, Established(c.Req)); err != nil {
		_ = client.Close()
		return
	}
	inner, scheme, err := ic.acceptInner(client, c.Target, c.HandshakeTimeout)
	if err != nil {
		ic.Logger.Debug().Err(err).Str("host", c.Target.Addr()).Msg("intercepted connection not established")
		_ = client.Close()
		return
	}
	ln := newOneConnListener(inner)
	var ended func()
	srv := &http.Server{
		Handler: &innerHandler{ic: ic, target: c.Target, scheme: scheme, remote: c.Req.RemoteAddr, ln: ln},
		// The same limits as the plain port's.
		ReadHeaderTimeout: clientconn.ReadHeaderTimeout,
		IdleTimeout:       ic.Idle,
		MaxHeaderBytes:    clientconn.MaxHeaderBytes,
		ErrorLog:          ic.ErrorLog,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: c.Streams},
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateClosed:
				ln.finish()
				ended()
			case http.StateHijacked:
				// A protocol switch: the relay that takes it over is
				// drained on its own (relay.Options.Drainers).
				ended()
			}
		},
	}
	_, h2 := inner.(*tls.Conn) // acceptInner: a *tls.Conn when ALPN chose h2
	ended = ic.Drainers.Add(serverDrainer{srv: srv, ln: ln, h2: h2})
	_ = srv.Serve(ln)
	// A shutdown closes the listener, and Serve returns, while the
	// connection is still being served: the tunnel lasts until the
	// connection itself is done.
	if !ln.handedOut.Load() {
		_ = inner.Close()
		ended()
		return
	}
	<-ln.finished
}

// acceptInner completes what the client starts after the 200: a TLS
// handshake (or, rarely, plain HTTP inside the tunnel). The result is the
// connection the inner server reads: a *tls.Conn when ALPN chose h2, so
// net/http switches to HTTP/2; otherwise wrapped in the framing check.
func (ic *Interceptor) acceptInner(client net.Conn, target Target, limit time.Duration) (net.Conn, string, error) {
	if limit <= 0 {
		limit = clientconn.ReadHeaderTimeout
	}
	_ = client.SetDeadline(time.Now().Add(limit))
	first := make([]byte, 1)
	if _, err := io.ReadFull(client, first); err != nil {
		return nil, "", fmt.Errorf("waiting for the client's first byte: %w", err)
	}
	conn := clientconn.Replay(client, first)
	if first[0] != clientconn.TLSRecordHandshake {
		_ = client.SetDeadline(time.Time{})
		return clientconn.Framed(conn), "http", nil
	}
	conf, err := certs.ServerConfig(ic.CA, ic.Leaves, target.Addr(), true)
	if err != nil {
		return nil, "", fmt.Errorf("leaf for %s: %w", target.Addr(), err)
	}
	ic.tickets.bind(conf, target.Addr())
	tc := tls.Server(conn, conf)
	if err := tc.Handshake(); err != nil {
		return nil, "", fmt.Errorf("TLS handshake: %w", err)
	}
	_ = client.SetDeadline(time.Time{})
	state := tc.ConnectionState()
	if ic.OnHandshake != nil {
		ic.OnHandshake(state.DidResume)
	}
	if state.NegotiatedProtocol == "h2" {
		return tc, "https", nil
	}
	return clientconn.Framed(tc), "https", nil
}

// innerHandler runs one request from inside an intercepted tunnel through
// the same decisions as a plain request, with the CONNECT target attached
// (so a request naming another host gets 421), and writes the answer.
type innerHandler struct {
	ic     *Interceptor
	target Target
	scheme string
	remote string
	ln     *oneConnListener
}

func (h *innerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				h.ic.Logger.Error().Str("panic", fmt.Sprint(v)).Msg("intercepted request panic recovered")
			}
			panic(http.ErrAbortHandler) // net/http closes the connection quietly
		}
	}()
	if r.Context().Err() != nil {
		// The client reset the stream (or left) before its handler ran:
		// there is nobody to answer, so no upstream attempt is started. A
		// client resetting streams as fast as it opens them must not make
		// the proxy dial on its behalf.
		return
	}
	r.URL.Scheme = h.scheme
	if r.URL.Host == "" {
		r.URL.Host = r.Host
	}
	if r.URL.Host == "" {
		r.URL.Host = h.target.Addr()
	}
	r.RemoteAddr = h.remote
	if r.ContentLength == 0 {
		r.Body = http.NoBody // an HTTP/2 request without a body must stay bodyless upstream
	}
	body := relay.WatchClientBody(w, r, h.ic.Idle)
	defer body.Finish()
	resp := h.ic.Handle(r, h.target)
	// A hijacked connection never reports StateClosed: the listener is
	// closed when a protocol switch takes the connection.
	relay.Answer(w, r, resp, relay.Options{Bufs: h.ic.Bufs, Idle: h.ic.Idle, Body: body, Drainers: h.ic.Drainers,
		Hijacked: func() { h.ln.finish() }})
}

// oneConnListener is a listener with a single connection: Accept hands it
// out once, then blocks until Close, so http.Server.Serve returns only when
// the connection is done or the server shuts down. serving is closed when
// Serve asks for a second connection, by which time it has started
// tracking the first; finished when the connection is done (finish).
type oneConnListener struct {
	conn      net.Conn
	handedOut atomic.Bool
	once      sync.Once
	done      chan struct{}
	asked     sync.Once
	serving   chan struct{}
	ended     sync.Once
	finished  chan struct{}
}

func newOneConnListener(c net.Conn) *oneConnListener {
	return &oneConnListener{conn: c, done: make(chan struct{}), serving: make(chan struct{}),
		finished: make(chan struct{})}
}

// Accept returns the connection the first time and net.ErrClosed after Close.
func (l *oneConnListener) Accept() (net.Conn, error) {
	if l.handedOut.CompareAndSwap(false, true) {
		return l.conn, nil
	}
	l.asked.Do(func() { close(l.serving) })
	<-l.done
	return nil, net.ErrClosed
}

// Close unblocks Accept; the connection itself belongs to the server.
func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// finish says the connection is done (closed, or its protocol switch
// relayed to the end), and unblocks Accept.
func (l *oneConnListener) finish() {
	l.ended.Do(func() { close(l.finished) })
	_ = l.Close()
}

// Addr is the connection's local address.
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }
