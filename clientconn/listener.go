package clientconn

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// MaxHeaderBytes bounds a request head on every client connection, the
// plain port and inside intercepted tunnels alike (docs/behaviour.md §10).
const MaxHeaderBytes = 64 << 10

// ReadHeaderTimeout bounds the wait for a request head, likewise.
const ReadHeaderTimeout = 10 * time.Second

// TLSRecordHandshake is the first byte of a TLS ClientHello record.
const TLSRecordHandshake = 0x16

// Listener is the proxy port's listener. It caps the number of open client
// connections (beyond the limit a connection is answered 503 and closed at
// once, instead of queueing silently in the kernel's backlog) and hands out
// every connection as a Conn.
type Listener struct {
	net.Listener
	max    int64
	idle   time.Duration
	active atomic.Int64
	// OnAcceptError, when set, is told of every failed Accept but the one
	// of a closed listener. net/http retries them quietly (its own log
	// line is at debug level), so a proxy out of file descriptors would
	// otherwise refuse clients with nothing said.
	OnAcceptError func(error)
}

// NewListener wraps ln; max <= 0 disables the limit, idle <= 0 the idle
// rule.
func NewListener(ln net.Listener, max int, idle time.Duration) *Listener {
	return &Listener{Listener: ln, max: int64(max), idle: idle}
}

// Accept returns the next connection within the limit.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if l.OnAcceptError != nil && !errors.Is(err, net.ErrClosed) {
				l.OnAcceptError(err)
			}
			return nil, err
		}
		var release func()
		if l.max > 0 {
			if l.active.Add(1) > l.max {
				l.active.Add(-1)
				go refuse(c)
				continue
			}
			release = func() { l.active.Add(-1) }
		}
		return newConn(c, l.idle, release), nil
	}
}

// Active is the number of connections holding a slot.
func (l *Listener) Active() int64 { return l.active.Load() }

func refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(RawAnswer(http.StatusServiceUnavailable, "Retry-After: 1\r\n",
		"nora-breaker: too many client connections\r\n\r\n"))
	_ = c.Close()
}

// RawAnswer is a whole HTTP/1.1 answer for a connection net/http does not
// serve (refused before, or cut in the middle of, a request): the status,
// any extra header lines (each ending in CRLF), a plain-text body with its
// length counted, and Connection: close.
func RawAnswer(status int, extra, body string) []byte {
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\n%sContent-Type: text/plain; charset=utf-8\r\n"+
		"Content-Length: %d\r\nConnection: close\r\n\r\n%s", status, http.StatusText(status), extra, len(body), body)
}
