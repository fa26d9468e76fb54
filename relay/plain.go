package relay

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/nora-breaker/nora-breaker/clientconn"
)

// PlainWriter is the proxy port's ResponseWriter as goproxy sees it.
// goproxy parses and dispatches every plain request, but the answer is
// written by Answer from inside the proxy's request hook, before goproxy
// would write it its own way (copying headers into net/http's sniffing
// writer, treating any answer that looks like a websocket handshake as
// one, flushing only event streams). Finish then makes everything goproxy
// still writes a no-op. A hijacker is handed the client connection with
// the hijacked idle rule.
type PlainWriter struct {
	http.ResponseWriter
	idle     time.Duration
	finished bool
	scratch  http.Header // what Header hands out once the answer is written
}

// NewPlainWriter wraps w; idle is the client connections' idle timeout.
func NewPlainWriter(w http.ResponseWriter, idle time.Duration) *PlainWriter {
	return &PlainWriter{ResponseWriter: w, idle: idle}
}

// Finish marks the answer written: goproxy's own writing after the hook
// returns goes nowhere.
func (w *PlainWriter) Finish() { w.finished = true }

// Header is the answer's header, or a scratch one once it is written.
func (w *PlainWriter) Header() http.Header {
	if w.finished {
		if w.scratch == nil {
			w.scratch = http.Header{}
		}
		return w.scratch
	}
	return w.ResponseWriter.Header()
}

// WriteHeader writes the status line, unless the answer is written.
func (w *PlainWriter) WriteHeader(code int) {
	if !w.finished {
		w.ResponseWriter.WriteHeader(code)
	}
}

// Write writes body bytes, unless the answer is written.
func (w *PlainWriter) Write(p []byte) (int, error) {
	if w.finished {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Flush passes flushes through.
func (w *PlainWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && !w.finished {
		f.Flush()
	}
}

// Hijack hands the hijacker (goproxy for a CONNECT, Answer for a protocol
// switch) the client connection, switched to the hijacked form of its idle
// rule (clientconn.Conn).
func (w *PlainWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
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
	c = clientconn.Hijacked(c, w.idle)
	// Bytes the client sent right behind the CONNECT head (a TLS ClientHello
	// in the same packet) sit in net/http's reader. They are moved into the
	// connection itself, so whoever reads the connection next sees them,
	// whether or not it knows about rw.
	if n := rw.Reader.Buffered(); n > 0 {
		pending, _ := rw.Reader.Peek(n)
		c = clientconn.Replay(c, append([]byte(nil), pending...))
		_, _ = rw.Reader.Discard(n)
	}
	return c, rw, nil
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *PlainWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
