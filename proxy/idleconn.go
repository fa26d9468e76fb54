package proxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

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
func (c *idleConn) SetDeadline(t time.Time) error { return c.setCaps(true, true, t) }

// SetReadDeadline sets the read cap.
func (c *idleConn) SetReadDeadline(t time.Time) error { return c.setCaps(true, false, t) }

// SetWriteDeadline sets the write cap.
func (c *idleConn) SetWriteDeadline(t time.Time) error { return c.setCaps(false, true, t) }

// setCaps sets the read and/or write cap to t and applies them with the
// idle deadline in force.
func (c *idleConn) setCaps(read, write bool, t time.Time) error {
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
