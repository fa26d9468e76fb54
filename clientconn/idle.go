package clientconn

import (
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// errTLSOnPlainPort ends a connection that opened with a TLS handshake.
var errTLSOnPlainPort = errors.New("TLS handshake on the plain HTTP proxy port")

// Conn is a client connection of the proxy port with every rule the port
// puts on its bytes: a client that starts TLS on the plain port (a proxy
// URL written https://) is answered 400 at once instead of waiting for a
// request line that never comes; the framing check (framing); the one idle
// rule below; and its max_connections slot is released exactly once when it
// is closed.
//
// The idle rule has two forms, one per owner of the connection. While
// net/http serves it, a write that makes no progress for the idle timeout
// fails: a client that asks for a large body and never reads it would
// otherwise hold its connection, its slot and the upstream connection
// feeding it for as long as the upstream keeps sending. The deadline is set
// just before each write and only for its duration, so time between writes
// (waiting for an upstream's headers, keep-alive between requests) never
// counts, and a write that makes some progress gets a fresh interval for
// the rest: a slow reader is never cut while it keeps reading. Reads are
// net/http's own business (ReadHeaderTimeout, IdleTimeout).
//
// Once hijacked (a CONNECT tunnel, an intercepted connection, a protocol
// switch: MarkHijacked) net/http's timeouts no longer apply, and the
// connection ends when it has neither read nor written for the idle
// timeout, so an abandoned tunnel cannot hold a goroutine and a file
// descriptor forever. Deadlines its new user sets (the server of an
// intercepted connection sets one for each request head) are caps the idle
// refresh never moves past, so a client trickling a request head one byte
// at a time is still cut at the header timeout.
type Conn struct {
	halfCloser
	idle    time.Duration
	release func() // frees the connection's slot; nil without a limit
	closed  sync.Once

	checked bool    // the first byte was looked at (net/http reads on one goroutine)
	f       framing // used only before the hijack, by net/http's reader

	hijack atomic.Bool
	last   atomic.Int64 // unix nanos of the last idle refresh, once hijacked

	mu       sync.Mutex // orders deadline updates once hijacked
	readCap  time.Time  // deadline set with SetReadDeadline/SetDeadline; zero = none
	writeCap time.Time  // deadline set with SetWriteDeadline/SetDeadline; zero = none
}

// newConn wraps c with idle (<= 0: no idle rule) and release (nil: no slot).
func newConn(c net.Conn, idle time.Duration, release func()) *Conn {
	return &Conn{halfCloser: halfCloser{c}, idle: idle, release: release}
}

// IdleBounded returns c under the hijacked form of the idle rule, with no
// slot to release: the upstream side of a blind tunnel. The client side's
// rule alone does not end a tunnel whose upstream never closes its end (a
// black hole): once the client's half has ended, by its timeout or its
// half-close, the relay waits only on the upstream, and without a deadline
// there it would wait, holding the client's slot, forever. Every byte of
// the tunnel passes both sides, so both rules measure the same silence
// (docs/behaviour.md §5.1). idle <= 0 returns c as it is.
func IdleBounded(c net.Conn, idle time.Duration) net.Conn {
	if idle <= 0 {
		return c
	}
	w := newConn(c, idle, nil)
	w.hijacked()
	return w
}

// IdleOf returns the idle timeout of the Conn under c (found through
// anything with a NetConn method, *tls.Conn included), or 0 when there is
// none: what a relay taking over c bounds its other side by.
func IdleOf(c net.Conn) time.Duration {
	for c != nil {
		if w, ok := c.(*Conn); ok {
			return w.idle
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return 0
		}
		c = u.NetConn()
	}
	return 0
}

// hijacked switches to the hijacked form of the idle rule (net/http has
// just cleared its deadlines) and ends the framing check.
func (c *Conn) hijacked() {
	if c.hijack.Swap(true) || c.idle <= 0 {
		return
	}
	c.refresh(true)
}

func (c *Conn) Read(p []byte) (int, error) {
	if c.hijack.Load() {
		n, err := c.Conn.Read(p)
		if n > 0 && c.idle > 0 {
			c.refresh(false)
		}
		return n, err
	}
	if c.f.failed {
		return 0, errFramingRead()
	}
	n, err := c.Conn.Read(p)
	if !c.checked && n > 0 {
		c.checked = true
		if p[0] == TLSRecordHandshake {
			_, _ = c.Conn.Write(RawAnswer(http.StatusBadRequest, "",
				"nora-breaker: this port speaks plain HTTP; use an http:// proxy URL\r\n\r\n"))
			// As a read error net/http closes without a 400 of its own.
			return 0, &net.OpError{Op: "read", Net: "tcp", Err: errTLSOnPlainPort}
		}
	}
	return c.f.read(p, n, err, c.Conn, false)
}

func (c *Conn) Write(p []byte) (int, error) {
	switch {
	case c.idle <= 0:
		return c.Conn.Write(p)
	case c.hijack.Load():
		n, err := c.Conn.Write(p)
		if n > 0 {
			c.refresh(false)
		}
		return n, err
	}
	written := 0
	for {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
		n, err := c.Conn.Write(p[written:])
		written += n
		if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return written, err
		}
		// The client took some bytes before the deadline: still reading.
	}
}

// Close releases the connection's slot (once) and closes it.
func (c *Conn) Close() error {
	c.closed.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
	return c.Conn.Close()
}

// refresh moves the hijacked connection's deadlines forward. To keep the
// hot path cheap it only touches them when an eighth of the timeout has
// passed since the last move, so the effective timeout lies between 7/8
// and 8/8 of idle.
func (c *Conn) refresh(force bool) {
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
func (c *Conn) apply(idleAt time.Time) {
	_ = c.Conn.SetReadDeadline(earliest(idleAt, c.readCap))
	_ = c.Conn.SetWriteDeadline(earliest(idleAt, c.writeCap))
}

// SetDeadline sets both deadlines: net/http's own before the hijack, caps
// after it.
func (c *Conn) SetDeadline(t time.Time) error { return c.setDeadlines(true, true, t) }

// SetReadDeadline sets the read deadline (a cap once hijacked).
func (c *Conn) SetReadDeadline(t time.Time) error { return c.setDeadlines(true, false, t) }

// SetWriteDeadline sets the write deadline (a cap once hijacked).
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.setDeadlines(false, true, t) }

func (c *Conn) setDeadlines(read, write bool, t time.Time) error {
	if !c.hijack.Load() || c.idle <= 0 {
		switch {
		case read && write:
			return c.Conn.SetDeadline(t)
		case read:
			return c.Conn.SetReadDeadline(t)
		default:
			return c.Conn.SetWriteDeadline(t)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if read {
		c.readCap = t
	}
	if write {
		c.writeCap = t
	}
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
