package relay

import (
	"io"
	"net/http"
	"strconv"
	"time"
)

// WriteResponse sends resp to the client of an intercepted tunnel's server
// (HTTP/1 or HTTP/2), streaming the body through a pooled buffer. It
// flushes when the upstream had less than a buffer's worth ready, so slow
// bodies reach the client as they arrive while large ones stream in full
// buffers without a flush per write. A write that makes no progress for
// idle fails: a client that stopped reading is cut off, on HTTP/2 too,
// where a stalled stream does not stall the connection.
func WriteResponse(w http.ResponseWriter, resp *http.Response, bufs *Buffers, idle time.Duration) {
	hdr := w.Header()
	for k, vv := range resp.Header {
		hdr[k] = vv
	}
	if resp.ContentLength >= 0 && hdr.Get("Content-Length") == "" {
		hdr.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	bp := bufs.get()
	defer bufs.put(bp)
	dw := &deadlineWriter{w: w, rc: rc, idle: idle}
	defer dw.clear()
	_, readErr, writeErr := streamBody(dw, func() { _ = rc.Flush() }, resp.Body, *bp)
	if writeErr != nil {
		return
	}
	if readErr != nil {
		// The upstream broke off: end the connection (or stream) so the
		// client sees a truncated body, never a short one that looks whole.
		panic(http.ErrAbortHandler)
	}
	for k, vv := range resp.Trailer {
		for _, v := range vv {
			hdr.Add(http.TrailerPrefix+k, v)
		}
	}
}

// deadlineWriter moves a response's write deadline idle ahead before its
// writes. It refreshes at most every idle/8, so the deadline it leaves lies
// between 7/8 and 8/8 of idle ahead, without a deadline call per write.
// It is the per-answer form of the idle rule (clientconn.Conn is the
// per-connection one): an HTTP/2 stream has no connection of its own.
type deadlineWriter struct {
	w    io.Writer
	rc   *http.ResponseController
	idle time.Duration
	last time.Time
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	if d.idle > 0 {
		if now := time.Now(); now.Sub(d.last) >= d.idle/8 {
			_ = d.rc.SetWriteDeadline(now.Add(d.idle))
			d.last = now
		}
	}
	return d.w.Write(p)
}

// clear removes the deadline, so it cannot outlive the response and cut
// the next one on a kept-alive connection.
func (d *deadlineWriter) clear() {
	if !d.last.IsZero() {
		_ = d.rc.SetWriteDeadline(time.Time{})
	}
}
