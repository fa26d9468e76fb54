package clientconn

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
)

// errAmbiguousFraming ends a client connection whose request carried both
// Content-Length and Transfer-Encoding. It reaches net/http wrapped as a read
// error (errFramingRead), which net/http ends the connection on without
// writing an answer of its own: the framing check has already written one.
var errAmbiguousFraming = errors.New("request has both Content-Length and Transfer-Encoding")

// errFramingRead is errAmbiguousFraming as net/http must see it.
func errFramingRead() error {
	return &net.OpError{Op: "read", Net: "tcp", Err: errAmbiguousFraming}
}

// framing follows the bytes a client sends on the plain proxy port and
// inside intercepted HTTP/1 tunnels, and refuses a request that carries both
// Content-Length and Transfer-Encoding (docs/behaviour.md §10). net/http
// would silently drop the Content-Length of such a request and carry on; a
// proxy in front of other servers must not guess which framing the client
// meant, so the conflict is caught here, before net/http parses the head.
//
// To find each request head it follows the bodies in between exactly as
// net/http frames them: chunked when an HTTP/1.1 request says
// Transfer-Encoding (an HTTP/1.0 request's Transfer-Encoding is ignored),
// else Content-Length, else no body; folded header lines belong to the
// header above them. It keeps scanning for as long as the connection speaks
// HTTP/1, whatever the requests ask for: only when the connection is
// hijacked (an accepted CONNECT, a 101 protocol switch) does what follows
// stop being HTTP/1, and the hijacker says so (MarkHijacked). It also gives
// up on input net/http itself refuses and closes the connection for (an
// oversized head, a malformed chunk), since no request can follow it.
//
// A framing is used by one reading goroutine at a time.
type framing struct {
	state   framingState
	head    []byte // the current head so far, capped
	remain  int64  // bytes left in a fixed-length body or chunk
	line    []byte // the current chunk-size or trailer line
	failed  bool
	stopped bool // input net/http refuses too: nothing to follow
}

// read scans what conn.Read delivered into p; after a conflicting head it
// has written the 400 to w and every read fails.
func (f *framing) read(p []byte, n int, err error, w net.Conn, hijacked bool) (int, error) {
	if f.failed {
		return 0, errFramingRead()
	}
	if n > 0 && !f.stopped && !hijacked && !f.scan(p[:n]) {
		f.failed = true
		_, _ = w.Write(RawAnswer(http.StatusBadRequest, "",
			"nora-breaker: request has both Content-Length and Transfer-Encoding\r\n\r\n"))
		return 0, errFramingRead()
	}
	return n, err
}

// framedConn is the framing check alone, for the HTTP/1 connection inside
// an intercepted tunnel (the tunnel's outer connection has the idle rule).
type framedConn struct {
	halfCloser
	f      framing
	hijack atomic.Bool // the connection left HTTP/1
}

// Framed wraps c, an HTTP/1 connection net/http is about to serve, in the
// framing check.
func Framed(c net.Conn) net.Conn { return &framedConn{halfCloser: halfCloser{c}} }

// hijacked ends scanning: what follows is a tunnel or another protocol.
func (c *framedConn) hijacked() { c.hijack.Store(true) }

func (c *framedConn) Read(p []byte) (int, error) {
	if c.f.failed {
		return 0, errFramingRead()
	}
	n, err := c.Conn.Read(p)
	return c.f.read(p, n, err, c.Conn, c.hijack.Load())
}

type framingState uint8

const (
	inHead framingState = iota
	inBody
	inChunkSize
	inChunkData
	inChunkCRLF
	inTrailer
)

// maxScannedHead bounds how much of a head is kept; a larger head is
// refused by net/http (431) anyway, so scanning just stops.
const maxScannedHead = MaxHeaderBytes + 4096

// scan advances the framing state over b; false means a conflicting head.
func (c *framing) scan(b []byte) bool {
	for len(b) > 0 && !c.stopped {
		switch c.state {
		case inHead:
			i := bytes.Index(b, []byte("\n"))
			if i < 0 {
				c.appendHead(b)
				return true
			}
			c.appendHead(b[:i+1])
			b = b[i+1:]
			if isHeadEnd(c.head) {
				if !c.endHead() {
					return false
				}
			}
		case inBody, inChunkData:
			k := int64(len(b))
			if k > c.remain {
				k = c.remain
			}
			c.remain -= k
			b = b[k:]
			if c.remain == 0 {
				if c.state == inBody {
					c.state = inHead
				} else {
					c.state = inChunkCRLF
				}
			}
		case inChunkCRLF, inChunkSize, inTrailer:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				c.appendLine(b)
				return true
			}
			c.appendLine(b[:i+1])
			b = b[i+1:]
			c.endLine()
		}
	}
	return true
}

func (c *framing) appendHead(b []byte) {
	if len(c.head)+len(b) > maxScannedHead {
		c.stopped = true // net/http answers 431 to this head
		return
	}
	c.head = append(c.head, b...)
}

func (c *framing) appendLine(b []byte) {
	if len(c.line)+len(b) > 4096 {
		c.stopped = true // a malformed chunk; net/http rejects it
		return
	}
	c.line = append(c.line, b...)
}

// isHeadEnd reports whether head ends with an empty line. Leading empty
// lines before a request line are allowed (RFC 9112 §2.2) and skipped.
func isHeadEnd(head []byte) bool {
	trimmed := bytes.TrimLeft(head, "\r\n")
	if len(trimmed) == 0 {
		return false
	}
	return bytes.HasSuffix(trimmed, []byte("\n\n")) || bytes.HasSuffix(trimmed, []byte("\n\r\n"))
}

// endHead inspects a complete head and sets up the body state. It walks the
// head in place, without splitting it into strings: it runs for every
// request on the plain port.
func (c *framing) endHead() bool {
	head := bytes.TrimLeft(c.head, "\r\n")
	first := true
	http10 := false
	var cl, te bool
	var length int64
	for len(head) > 0 {
		line := head
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			line, head = head[:i], head[i+1:]
		} else {
			head = nil
		}
		if first {
			// net/http reads "METHOD SP URI SP PROTO"; only HTTP/1.0
			// changes how the body is framed.
			_, rest, _ := bytes.Cut(line, []byte(" "))
			_, proto, _ := bytes.Cut(rest, []byte(" "))
			http10 = string(bytes.TrimSuffix(proto, []byte("\r"))) == "HTTP/1.0"
			first = false
			continue
		}
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			continue // a folded line continues the header above it
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		name = bytes.TrimSpace(name)
		switch {
		case asciiEqualFold(name, "content-length"):
			cl = true
			length, _ = strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
		case asciiEqualFold(name, "transfer-encoding"):
			te = true
		}
	}
	c.head = c.head[:0]
	switch {
	case cl && te:
		return false
	case te && !http10:
		c.state = inChunkSize
	case length > 0:
		c.state, c.remain = inBody, length
	}
	return true
}

// asciiEqualFold compares a header name with a lower-case constant.
func asciiEqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// endLine handles one complete line inside a chunked body.
func (c *framing) endLine() {
	line := strings.TrimRight(string(c.line), "\r\n")
	c.line = c.line[:0]
	switch c.state {
	case inChunkCRLF:
		c.state = inChunkSize
	case inChunkSize:
		sizeText, _, _ := strings.Cut(line, ";")
		size, err := strconv.ParseInt(strings.TrimSpace(sizeText), 16, 64)
		switch {
		case err != nil || size < 0:
			c.stopped = true // malformed: net/http refuses the body itself
		case size == 0:
			c.state = inTrailer
		default:
			c.state, c.remain = inChunkData, size
		}
	case inTrailer:
		if line == "" {
			c.state = inHead
		}
	}
}
