package proxy

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// limitListener caps the number of open client connections. Beyond the
// limit a connection is answered 503 and closed at once, instead of queueing
// silently in the kernel's backlog (SPEC §10).
type limitListener struct {
	net.Listener
	max    int64
	active atomic.Int64
	log    zerolog.Logger
}

// newLimitListener wraps ln; max <= 0 disables the limit.
func newLimitListener(ln net.Listener, max int, log zerolog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), log: log}
}

const overloadedResponse = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 45\r\nConnection: close\r\n\r\n" +
	"nora-breaker: too many client connections\r\n\r\n"

// Accept returns the next connection within the limit.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max > 0 && l.active.Add(1) > l.max {
			l.active.Add(-1)
			go refuse(c)
			continue
		}
		if l.max <= 0 {
			l.active.Add(1)
		}
		return &countedConn{Conn: &framingConn{Conn: c}, l: l}, nil
	}
}

// Active reports the number of open client connections.
func (l *limitListener) Active() int64 { return l.active.Load() }

func refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write([]byte(overloadedResponse))
	_ = c.Close()
}

// countedConn releases its slot exactly once when closed.
type countedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.active.Add(-1) })
	return c.Conn.Close()
}

// CloseWrite and CloseRead keep half-close working for goproxy's tunnels.
func (c *countedConn) CloseWrite() error { return closeWrite(c.Conn) }

// CloseRead half-closes the read side when the underlying conn supports it.
func (c *countedConn) CloseRead() error { return closeRead(c.Conn) }

// idleConn closes a hijacked connection (tunnel or intercepted TLS) that has
// neither read nor written for the idle timeout: net/http clears deadlines on
// Hijack and goproxy sets none, so without this an abandoned tunnel would
// hold a goroutine and a file descriptor forever.
type idleConn struct {
	net.Conn
	idle time.Duration
	last atomic.Int64 // unix nanos of the last deadline refresh
}

func newIdleConn(c net.Conn, idle time.Duration) *idleConn {
	ic := &idleConn{Conn: c, idle: idle}
	ic.refresh(true)
	return ic
}

// refresh moves the deadline forward. To keep the hot path cheap it only
// touches the deadline when an eighth of the timeout has passed since the
// last move, so the effective timeout lies between 7/8 and 8/8 of idle.
func (c *idleConn) refresh(force bool) {
	now := time.Now()
	if !force && now.UnixNano()-c.last.Load() < int64(c.idle/8) {
		return
	}
	c.last.Store(now.UnixNano())
	_ = c.Conn.SetDeadline(now.Add(c.idle))
}

func (c *idleConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.refresh(false)
	}
	return n, err
}

func (c *idleConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.refresh(false)
	}
	return n, err
}

// CloseWrite keeps half-close working for goproxy's tunnels.
func (c *idleConn) CloseWrite() error { return closeWrite(c.Conn) }

// CloseRead half-closes the read side when the underlying conn supports it.
func (c *idleConn) CloseRead() error { return closeRead(c.Conn) }

var errNoHalfClose = errors.New("connection does not support half-close")

func closeWrite(c net.Conn) error {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return errNoHalfClose
}

func closeRead(c net.Conn) error {
	if hc, ok := c.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return errNoHalfClose
}

// clientWriter wraps the proxy listener's ResponseWriter. It flushes after
// every write, because goproxy's plain path only flushes server-sent events
// and would hold chunked streams back in net/http's buffer, and it puts an
// idle timeout on connections that goproxy hijacks for CONNECT.
type clientWriter struct {
	http.ResponseWriter
	idle time.Duration
}

func (w *clientWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if f, ok := w.ResponseWriter.(http.Flusher); ok && err == nil {
		f.Flush()
	}
	return n, err
}

// Flush passes flushes through.
func (w *clientWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands goproxy the client connection wrapped with the idle timeout.
func (w *clientWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("connection cannot be hijacked")
	}
	c, rw, err := h.Hijack()
	if err != nil || w.idle <= 0 {
		return c, rw, err
	}
	return newIdleConn(c, w.idle), rw, nil
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *clientWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
