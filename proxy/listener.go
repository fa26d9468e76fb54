package proxy

// The proxy listener's connections: each accepted connection is counted
// against max_connections and wrapped, innermost first, in the stalled-write
// timeout, the request framing check and the TLS-on-the-plain-port check.

import (
	"errors"
	"fmt"
	"net"
	"net/http"
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
		stall := newStallConn(halfCloser{c}, l.idle)
		framed := &framingConn{halfCloser: halfCloser{stall}}
		plain := &plainOnlyConn{halfCloser: halfCloser{framed}}
		if l.max <= 0 {
			return plain, nil
		}
		return &countedConn{halfCloser: halfCloser{plain}, l: l}, nil
	}
}

func refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(rawAnswer(http.StatusServiceUnavailable, "Retry-After: 1\r\n",
		"nora-breaker: too many client connections\r\n\r\n"))
	_ = c.Close()
}

// rawAnswer is a whole HTTP/1.1 answer for a connection net/http does not
// serve (refused before, or cut in the middle of, a request): the status,
// any extra header lines (each ending in CRLF), a plain-text body with its
// length counted, and Connection: close.
func rawAnswer(status int, extra, body string) []byte {
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\n%sContent-Type: text/plain; charset=utf-8\r\n"+
		"Content-Length: %d\r\nConnection: close\r\n\r\n%s", status, http.StatusText(status), extra, len(body), body)
}

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
			_, _ = c.Conn.Write(rawAnswer(http.StatusBadRequest, "",
				"nora-breaker: this port speaks plain HTTP; use an http:// proxy URL\r\n\r\n"))
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
