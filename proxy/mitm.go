package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/nora-breaker/nora-breaker/certs"
	"github.com/nora-breaker/nora-breaker/clientconn"
	"github.com/nora-breaker/nora-breaker/config"
)

// Intercepted connections are served here rather than by goproxy's MITM
// loop: goproxy reads the requests inside a hijacked connection itself, with
// no limit on the size of a request head and no timeout for it, and the
// listener's MaxHeaderBytes and ReadHeaderTimeout do not reach a hijacked
// connection. An http.Server of our own, serving just the one connection,
// puts the same limits on what arrives inside the tunnel as on the plain
// port, speaks HTTP/2 when ALPN picks it, and refuses an ambiguous
// Content-Length + Transfer-Encoding head as the plain port does.

// interceptAction answers an intercepted CONNECT: goproxy hands us the raw
// client connection and we do the rest, under the snapshot the CONNECT was
// decided with (each request inside takes its own).
func (p *Proxy) interceptAction(cs *connectState, hostport string, snap *snapshot) *goproxy.ConnectAction {
	return &goproxy.ConnectAction{Action: goproxy.ConnectHijack,
		Hijack: func(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
			p.serveIntercepted(req, client, cs, hostport, snap)
		}}
}

// serveIntercepted confirms the CONNECT, terminates TLS with a leaf for the
// CONNECT host and serves the requests inside until the client leaves or the
// connection idles out. It returns when the connection is closed.
func (p *Proxy) serveIntercepted(connectReq *http.Request, client net.Conn, cs *connectState, hostport string,
	snap *snapshot) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error().Str("panic", fmt.Sprint(v)).Str("host", hostport).Msg("intercept panic recovered")
			_ = client.Close()
		}
	}()
	if _, err := io.WriteString(client, connectEstablished(connectReq)); err != nil {
		_ = client.Close()
		return
	}
	inner, scheme, err := p.acceptInner(client, hostport, snap.cfg.Sidecar.TLSHandshakeTimeout)
	if err != nil {
		p.log.Debug().Err(err).Str("host", hostport).Msg("intercepted connection not established")
		_ = client.Close()
		return
	}
	ln := newOneConnListener(inner)
	srv := &http.Server{
		Handler:           &innerHandler{p: p, cs: cs, scheme: scheme, remote: connectReq.RemoteAddr, ln: ln},
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       p.fixed.idleTimeout,
		MaxHeaderBytes:    clientconn.MaxHeaderBytes,
		ErrorLog:          log.New(zerologWriter{p.log}, "", 0),
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: streamsPerClientConn(snap.cfg.Sidecar)},
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed {
				ln.Close()
			}
		},
	}
	_ = srv.Serve(ln)
}

// maxStreamsPerClientConn bounds the concurrent HTTP/2 streams of one
// intercepted client connection: 100, the least RFC 9113 recommends
// offering, and never more than the upstream connections one host may
// have, since with an HTTP/1 upstream each stream needs one of those. A
// client past the bound waits for a stream; one that resets streams faster
// than they finish is sent away by net/http once too many are queued.
const maxStreamsPerClientConn = 100

func streamsPerClientConn(sc config.Sidecar) int {
	return max(1, min(maxStreamsPerClientConn, sc.MaxUpstreamConnsPerHost))
}

// acceptInner completes what the client starts after the 200: a TLS
// handshake (or, rarely, plain HTTP inside the tunnel). The result is the
// connection the inner server reads: a *tls.Conn when ALPN chose h2, so
// net/http switches to HTTP/2; otherwise wrapped in the framing check.
func (p *Proxy) acceptInner(client net.Conn, hostport string, limit time.Duration) (net.Conn, string, error) {
	if limit <= 0 {
		limit = readHeaderTimeout
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
	conf, err := certs.ServerConfig(p.ca, p.certs, hostport, true)
	if err != nil {
		return nil, "", fmt.Errorf("leaf for %s: %w", hostport, err)
	}
	tc := tls.Server(conn, conf)
	if err := tc.Handshake(); err != nil {
		return nil, "", fmt.Errorf("TLS handshake: %w", err)
	}
	_ = client.SetDeadline(time.Time{})
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		return tc, "https", nil
	}
	return clientconn.Framed(tc), "https", nil
}

// innerHandler runs one request from inside an intercepted tunnel through
// the same decisions as a plain request, with the CONNECT target attached
// (so a request naming another host gets 421), and writes the answer.
type innerHandler struct {
	p      *Proxy
	cs     *connectState
	scheme string
	remote string
	ln     *oneConnListener
}

func (h *innerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				h.p.log.Error().Str("panic", fmt.Sprint(v)).Msg("intercepted request panic recovered")
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
		r.URL.Host = net.JoinHostPort(h.cs.host, h.cs.port)
	}
	r.RemoteAddr = h.remote
	if r.ContentLength == 0 {
		r.Body = http.NoBody // an HTTP/2 request without a body must stay bodyless upstream
	}
	resp := h.p.handle(r, h.cs)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		h.relayUpgrade(w, resp)
		return
	}
	writeInner(w, resp, h.p.bufs, h.p.fixed.idleTimeout)
}

// writeInner sends resp to the client, streaming the body through a pooled
// buffer. It flushes when the upstream had less than a buffer's worth ready,
// so slow bodies reach the client as they arrive while large ones stream in
// full buffers without a flush per write. A write that makes no progress for
// idle fails: a client that stopped reading is cut off, on HTTP/2 too, where
// a stalled stream does not stall the connection.
func writeInner(w http.ResponseWriter, resp *http.Response, bufs *sync.Pool, idle time.Duration) {
	hdr := w.Header()
	for k, vv := range resp.Header {
		hdr[k] = vv
	}
	if resp.ContentLength >= 0 && hdr.Get("Content-Length") == "" {
		hdr.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	dw := &deadlineWriter{w: w, rc: rc, idle: idle}
	defer dw.clear()
	_, readErr, writeErr := streamBody(dw, func() { _ = rc.Flush() }, resp.Body, *bp)
	if writeErr != nil {
		return
	}
	if readErr != nil {
		// The upstream broke off: end the connection (or stream) so the
		// client sees a truncated body, never a short one that looks whole.
		panic(http.ErrAbortHandler)
	}
	for k, vv := range resp.Trailer {
		for _, v := range vv {
			hdr.Add(http.TrailerPrefix+k, v)
		}
	}
}

// deadlineWriter moves a response's write deadline idle ahead before its
// writes. It refreshes at most every idle/8, so the deadline it leaves lies
// between 7/8 and 8/8 of idle ahead, without a deadline call per write.
type deadlineWriter struct {
	w    io.Writer
	rc   *http.ResponseController
	idle time.Duration
	last time.Time
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	if d.idle > 0 {
		if now := time.Now(); now.Sub(d.last) >= d.idle/8 {
			_ = d.rc.SetWriteDeadline(now.Add(d.idle))
			d.last = now
		}
	}
	return d.w.Write(p)
}

// clear removes the deadline, so it cannot outlive the response and cut
// the next one on a kept-alive connection.
func (d *deadlineWriter) clear() {
	if !d.last.IsZero() {
		_ = d.rc.SetWriteDeadline(time.Time{})
	}
}

// relayUpgrade hands an intercepted websocket over to a byte relay between
// the client and the upstream once the upstream agreed to switch protocols.
func (h *innerHandler) relayUpgrade(w http.ResponseWriter, resp *http.Response) {
	upstream, ok := resp.Body.(io.ReadWriteCloser)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if !ok || err != nil {
		http.Error(w, "nora-breaker: cannot switch protocols here", http.StatusBadGateway)
		return
	}
	defer h.ln.Close() // a hijacked connection never reports StateClosed
	defer conn.Close()
	clientconn.MarkHijacked(conn) // what follows is the new protocol, not HTTP/1
	head := *resp
	head.Body = nil
	if head.Write(brw) != nil || brw.Flush() != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(upstream, brw.Reader)
		_ = upstream.Close()
		close(done)
	}()
	_, _ = io.Copy(conn, upstream)
	_ = conn.Close()
	<-done
}

// oneConnListener is a listener with a single connection: Accept hands it
// out once, then blocks until Close, so http.Server.Serve returns only when
// the connection is done.
type oneConnListener struct {
	conn  net.Conn
	taken sync.Once
	once  sync.Once
	done  chan struct{}
}

func newOneConnListener(c net.Conn) *oneConnListener {
	return &oneConnListener{conn: c, done: make(chan struct{})}
}

// Accept returns the connection the first time and net.ErrClosed after Close.
func (l *oneConnListener) Accept() (net.Conn, error) {
	var c net.Conn
	l.taken.Do(func() { c = l.conn })
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

// Close unblocks Accept; the connection itself belongs to the server.
func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the connection's local address.
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }
