package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nora-breaker/nora-breaker/clientconn"
)

// clientWriter wraps the proxy listener's ResponseWriter. It flushes after
// every write, because goproxy's plain path only flushes server-sent events
// and would hold chunked streams back in net/http's buffer, and it puts an
// idle timeout on connections that goproxy hijacks for CONNECT.
type clientWriter struct {
	http.ResponseWriter
	idle time.Duration
	bufs *sync.Pool
}

func (w *clientWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if f, ok := w.ResponseWriter.(http.Flusher); ok && err == nil {
		f.Flush()
	}
	return n, err
}

// newCopyBufs makes the pool of buffers ReadFrom copies response bodies
// through; without it every response would allocate a fresh 32 KiB buffer.
func newCopyBufs() *sync.Pool {
	return &sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
}

// ReadFrom copies a response body to the client (goproxy's io.Copy lands
// here) through a pooled buffer; see streamBody for when it flushes. When
// the upstream breaks off, the connection is aborted as on the intercepted
// path (writeInner): goproxy would only log the error and return, and
// net/http would then end a chunked body cleanly, handing the client a short
// body that looks whole (docs/behaviour.md §5.3).
func (w *clientWriter) ReadFrom(src io.Reader) (int64, error) {
	bp := w.bufs.Get().(*[]byte)
	defer w.bufs.Put(bp)
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

// streamBody copies src to dst through buf. It flushes only when src had
// less than a buffer's worth ready: a large body streams in full buffers
// without a flush per write, while a trickling stream (NDJSON, a slow
// upstream) still reaches the client as each piece arrives. It reports the
// bytes written and which side failed; reaching src's EOF is no error.
func streamBody(dst io.Writer, flush func(), src io.Reader, buf []byte) (written int64, readErr, writeErr error) {
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			m, werr := dst.Write(buf[:n])
			written += int64(m)
			if werr != nil {
				return written, nil, werr
			}
			if n < len(buf) {
				flush()
			}
		}
		if rerr == io.EOF {
			return written, nil, nil
		}
		if rerr != nil {
			return written, rerr, nil
		}
	}
}

// Flush passes flushes through.
func (w *clientWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands goproxy the client connection, switched to the hijacked form
// of its idle rule (clientconn.Conn).
func (w *clientWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
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
func (w *clientWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
