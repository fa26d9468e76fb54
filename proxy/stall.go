package proxy

import (
	"errors"
	"os"
	"sync/atomic"
	"time"
)

// stallConn ends a plain-port client connection whose writes make no
// progress for the idle timeout: a client that asks for a large body and
// never reads it would otherwise hold its connection (and its
// max_connections slot, and the upstream connection feeding it) for as long
// as the upstream keeps sending. A stalled write is idle time.
//
// The deadline is set just before each write and only for its duration, so
// time spent between writes (a client waiting for a slow upstream's
// headers, a keep-alive connection between requests) never counts. A write
// that makes some progress before the deadline gets a fresh interval for
// the rest, so a slow reader is never cut while it keeps reading.
//
// Once the connection is hijacked (a tunnel, a protocol switch) its new
// owner sets its own deadlines (idleConn) and stallConn steps aside.
type stallConn struct {
	halfCloser
	idle   time.Duration
	hijack atomic.Bool
}

func newStallConn(c halfCloser, idle time.Duration) *stallConn {
	return &stallConn{halfCloser: c, idle: idle}
}

// hijacked hands deadlines over to the connection's new owner (net/http
// has just cleared ours).
func (c *stallConn) hijacked() { c.hijack.Store(true) }

func (c *stallConn) Write(p []byte) (int, error) {
	if c.idle <= 0 || c.hijack.Load() {
		return c.Conn.Write(p)
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
