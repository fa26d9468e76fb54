package proxy

import (
	"errors"
	"net"
)

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
