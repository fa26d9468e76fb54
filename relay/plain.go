package relay

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/nora-breaker/nora-breaker/clientconn"
)

// PlainWriter wraps the proxy port's ResponseWriter for goproxy, which
// writes every plain answer. It flushes after every write, because goproxy's
// plain path only flushes server-sent events and would hold chunked streams
// back in net/http's buffer; it copies bodies through pooled buffers and
// aborts the connection when the upstream breaks off; and it hands a
// hijacker the client connection with the hijacked idle rule.
type PlainWriter struct {
	http.ResponseWriter
	idle time.Duration
	bufs *Buffers
}

// NewPlainWriter wraps w; idle is the client connections' idle timeout.
func NewPlainWriter(w http.ResponseWriter, idle time.Duration, bufs *Buffers) *PlainWriter {
	return &PlainWriter{ResponseWriter: w, idle: idle, bufs: bufs}
}

func (w *PlainWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if f, ok := w.ResponseWriter.(http.Flusher); ok && err == nil {
		f.Flush()
	}
	return n, err
}

// ReadFrom copies a response body to the client (goproxy's io.Copy lands
// here) through a pooled buffer; see streamBody for when it flushes. When
// the upstream breaks off, the connection is aborted as inside tunnels
// (WriteResponse): goproxy would only log the error and return, and
// net/http would then end a chunked body cleanly, handing the client a short
// body that looks whole (docs/behaviour.md §5.3).
func (w *PlainWriter) ReadFrom(src io.Reader) (int64, error) {
	bp := w.bufs.get()
	defer w.bufs.put(bp)
	n, rerr, werr := streamBody(w.ResponseWriter, w.Flush, src, *bp)
	if werr != nil {
		return n, werr
	}
	if rerr != nil {
		if c, ok := src.(io.Closer); ok {
			_ = c.Close() // the body's own log line and metrics
		}
		panic(http.ErrAbortHandler)
	}
	return n, nil
}

// Flush passes flushes through.
func (w *PlainWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands goproxy the client connection, switched to the hijacked form
// of its idle rule (clientconn.Conn).
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
