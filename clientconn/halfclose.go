package clientconn

import (
	"errors"
	"net"
	"time"
)

var errNoHalfClose = errors.New("connection does not support half-close")

// halfCloser is embedded by every connection wrapper in this package in
// place of a bare net.Conn: it passes CloseWrite and CloseRead through, which
// goproxy's tunnels use to half-close a *net.TCPConn, so wrapping a
// connection never turns a clean half-close into a full one.
type halfCloser struct{ net.Conn }

// NetConn returns the wrapped connection, so code holding the outermost
// wrapper can find the ones underneath (MarkHijacked).
func (h halfCloser) NetConn() net.Conn { return h.Conn }

// MarkHijacked tells every wrapper under c that watches the HTTP/1 traffic
// of a connection (the framing check, the idle rule) that the connection
// has left net/http: it is now a tunnel or another protocol, with a new
// owner. Hijackers call it on the connection they take over. It walks
// through anything with a NetConn method, *tls.Conn included.
func MarkHijacked(c net.Conn) {
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

// Replay returns c with pending read before c itself: bytes already taken
// from c (a peeked first byte, what net/http buffered behind a CONNECT head)
// that its next reader must still see.
func Replay(c net.Conn, pending []byte) net.Conn {
	if len(pending) == 0 {
		return c
	}
	return &replayConn{halfCloser: halfCloser{c}, pending: pending}
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

// Hijacked is MarkHijacked for the connection net/http has just handed a
// hijacker, which also makes sure the idle rule holds on it: a connection
// that did not come from Listener (a server of the caller's own) is
// wrapped in a Conn of the hijacked form, so no hijacked connection is ever
// without its idle timeout.
func Hijacked(c net.Conn, idle time.Duration) net.Conn {
	for u := c; u != nil; {
		if _, ok := u.(*Conn); ok {
			MarkHijacked(c)
			return c
		}
		w, ok := u.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		u = w.NetConn()
	}
	MarkHijacked(c)
	wrapped := newConn(c, idle, nil)
	wrapped.hijacked()
	return wrapped
}
