package proxy

// The proxy listener's connections: each accepted connection is counted
// against max_connections and wrapped, innermost first, in the stalled-write
// timeout, the request framing check and the TLS-on-the-plain-port check.

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// limitListener caps the number of open client connections. Beyond the
// limit a connection is answered 503 and closed at once, instead of queueing
// silently in the kernel's backlog (docs/behaviour.md §10).
type limitListener struct {
	net.Listener
	max    int64
	idle   time.Duration // a write stalled this long ends the connection
	active atomic.Int64
}

// newLimitListener wraps ln; max <= 0 disables the limit, idle <= 0 the
// stalled-write timeout.
func newLimitListener(ln net.Listener, max int, idle time.Duration) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), idle: idle}
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
