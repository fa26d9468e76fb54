package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// limitListener caps the number of open client connections. Beyond the
// limit a connection is answered 503 and closed at once, instead of queueing
// silently in the kernel's backlog (docs/behaviour.md §10).
type limitListener struct {
	net.Listener
	max    int64
	idle   time.Duration // a write stalled this long ends the connection
	active atomic.Int64
	log    zerolog.Logger
}

// newLimitListener wraps ln; max <= 0 disables the limit, idle <= 0 the
// stalled-write timeout.
func newLimitListener(ln net.Listener, max int, idle time.Duration, log zerolog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), idle: idle, log: log}
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
		stall := newStallConn(halfCloser{c}, l.idle)
		framed := &framingConn{halfCloser: halfCloser{stall}}
		plain := &plainOnlyConn{halfCloser: halfCloser{framed}}
		return &countedConn{halfCloser: halfCloser{plain}, l: l}, nil
	}
}

// Active reports the number of open client connections.
func (l *limitListener) Active() int64 { return l.active.Load() }

func refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write([]byte(overloadedResponse))
	_ = c.Close()
}

const tlsOnPlainPortResponse = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 71\r\nConnection: close\r\n\r\n" +
	"nora-breaker: this port speaks plain HTTP; use an http:// proxy URL\r\n\r\n"

// errTLSOnPlainPort ends a connection that opened with a TLS handshake.
var errTLSOnPlainPort = errors.New("TLS handshake on the plain HTTP proxy port")

// plainOnlyConn answers a client that starts TLS on the plain proxy port (a
// proxy URL written https://) at once, with a 400 naming the mistake,
// instead of letting net/http wait for a request line that never comes.
type plainOnlyConn struct {
	halfCloser
	checked bool // the first read happens before any other, on one goroutine
}

func (c *plainOnlyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.checked && n > 0 {
		c.checked = true
		if p[0] == tlsRecordHandshake {
			_, _ = c.Conn.Write([]byte(tlsOnPlainPortResponse))
			// As a read error net/http closes without a 400 of its own.
			return 0, &net.OpError{Op: "read", Net: "tcp", Err: errTLSOnPlainPort}
		}
	}
	return n, err
}

// countedConn releases its slot exactly once when closed.
type countedConn struct {
	halfCloser
	l    *limitListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.active.Add(-1) })
	return c.Conn.Close()
}

// idleConn closes a hijacked connection (tunnel or intercepted TLS) that has
// neither read nor written for the idle timeout: net/http clears deadlines on
// Hijack and goproxy sets none, so without this an abandoned tunnel would
// hold a goroutine and a file descriptor forever.
//
// Deadlines set by the connection's user (the http.Server that serves an
// intercepted connection sets one for each request head) are caps: the idle
// refresh never moves a deadline past them, so a client trickling a request
// head one byte at a time is still cut at the header timeout.
type idleConn struct {
	halfCloser
	idle time.Duration
	last atomic.Int64 // unix nanos of the last deadline refresh

	mu       sync.Mutex // orders deadline updates
	readCap  time.Time  // deadline set with SetReadDeadline/SetDeadline; zero = none
	writeCap time.Time  // deadline set with SetWriteDeadline/SetDeadline; zero = none
}

func newIdleConn(c net.Conn, idle time.Duration) *idleConn {
	ic := &idleConn{halfCloser: halfCloser{c}, idle: idle}
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
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last.Store(now.UnixNano())
	c.apply(now.Add(c.idle))
}

// apply sets the underlying deadlines to the idle deadline, capped by the
// user's own. The caller holds mu.
func (c *idleConn) apply(idleAt time.Time) {
	_ = c.Conn.SetReadDeadline(earliest(idleAt, c.readCap))
	_ = c.Conn.SetWriteDeadline(earliest(idleAt, c.writeCap))
}

// SetDeadline sets both caps.
func (c *idleConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readCap, c.writeCap = t, t
	c.apply(time.Unix(0, c.last.Load()).Add(c.idle))
	return nil
}

// SetReadDeadline sets the read cap.
func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readCap = t
	c.apply(time.Unix(0, c.last.Load()).Add(c.idle))
	return nil
}

// SetWriteDeadline sets the write cap.
func (c *idleConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeCap = t
	c.apply(time.Unix(0, c.last.Load()).Add(c.idle))
	return nil
}

// earliest returns the earlier of idle and limit; a zero limit means none.
func earliest(idle, limit time.Time) time.Time {
	if !limit.IsZero() && limit.Before(idle) {
		return limit
	}
	return idle
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

var errNoHalfClose = errors.New("connection does not support half-close")

// halfCloser is embedded by every connection wrapper in this package in
// place of a bare net.Conn: it passes CloseWrite and CloseRead through, which
// goproxy's tunnels use to half-close a *net.TCPConn, so wrapping a
// connection never turns a clean half-close into a full one.
type halfCloser struct{ net.Conn }

// NetConn returns the wrapped connection, so code holding the outermost
// wrapper can find the ones underneath (markHijacked).
func (h halfCloser) NetConn() net.Conn { return h.Conn }

// markHijacked tells every wrapper under c that watches the HTTP/1 traffic
// of a connection (the framing check, the stalled-write timeout) that the
// connection has left net/http: it is now a tunnel or another protocol,
// with a new owner. Hijackers call it on the connection they take over.
func markHijacked(c net.Conn) {
	for c != nil {
		if h, ok := c.(interface{ hijacked() }); ok {
			h.hijacked()
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = u.NetConn()
	}
}

// CloseWrite half-closes the write side when the wrapped conn supports it.
func (h halfCloser) CloseWrite() error {
	if hc, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return errNoHalfClose
}

// CloseRead half-closes the read side when the wrapped conn supports it.
func (h halfCloser) CloseRead() error {
	if hc, ok := h.Conn.(interface{ CloseRead() error }); ok {
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
	bufs *sync.Pool
}

func (w *clientWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if f, ok := w.ResponseWriter.(http.Flusher); ok && err == nil {
		f.Flush()
	}
	return n, err
}

// newCopyBufs makes the pool of buffers ReadFrom copies response bodies
// through; without it every response would allocate a fresh 32 KiB buffer.
func newCopyBufs() *sync.Pool {
	return &sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
}

// ReadFrom copies a response body to the client (goproxy's io.Copy lands
// here) through a pooled buffer; see streamBody for when it flushes.
func (w *clientWriter) ReadFrom(src io.Reader) (int64, error) {
	bp := w.bufs.Get().(*[]byte)
	defer w.bufs.Put(bp)
	n, rerr, werr := streamBody(w.ResponseWriter, w.Flush, src, *bp)
	if werr != nil {
		return n, werr
	}
	return n, rerr
}

// streamBody copies src to dst through buf. It flushes only when src had
// less than a buffer's worth ready: a large body streams in full buffers
// without a flush per write, while a trickling stream (NDJSON, a slow
// upstream) still reaches the client as each piece arrives. It reports the
// bytes written and which side failed; reaching src's EOF is no error.
func streamBody(dst io.Writer, flush func(), src io.Reader, buf []byte) (written int64, readErr, writeErr error) {
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			m, werr := dst.Write(buf[:n])
			written += int64(m)
			if werr != nil {
				return written, nil, werr
			}
			if n < len(buf) {
				flush()
			}
		}
		if rerr == io.EOF {
			return written, nil, nil
		}
		if rerr != nil {
			return written, rerr, nil
		}
	}
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
	if err != nil {
		return c, rw, err
	}
	// A CONNECT or a 101 switch: the client's bytes from here on are a
	// tunnel or another protocol, no longer HTTP/1 requests.
	markHijacked(c)
	if w.idle > 0 {
		c = newIdleConn(c, w.idle)
	}
	// Bytes the client sent right behind the CONNECT head (a TLS ClientHello
	// in the same packet) sit in net/http's reader. They are moved into the
	// connection itself, so whoever reads the connection next sees them,
	// whether or not it knows about rw.
	if n := rw.Reader.Buffered(); n > 0 {
		pending, _ := rw.Reader.Peek(n)
		c = &replayConn{halfCloser: halfCloser{c}, pending: append([]byte(nil), pending...)}
		_, _ = rw.Reader.Discard(n)
	}
	return c, rw, nil
}

// replayConn returns pending bytes before reading the connection again.
type replayConn struct {
	halfCloser
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *clientWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
