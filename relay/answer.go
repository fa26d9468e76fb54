package relay

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/clientconn"
)

// Options say how Answer writes one answer.
type Options struct {
	// Bufs are the copy buffers.
	Bufs *Buffers
	// Idle bounds each write of the answer (the per-answer form of the idle
	// rule: an HTTP/2 stream has no connection of its own). Zero where the
	// connection enforces it itself (the plain port, clientconn.Conn).
	Idle time.Duration
	// Body is the client's request body (nil: the request had none).
	Body *ClientBody
	// Hijacked, when set, is called once a protocol switch has taken the
	// connection over.
	Hijacked func()
	// Drainers registers a protocol switch's relay, so a shutdown drains
	// it like every other connection (nil: not drained).
	Drainers *clientconn.Drainers
}

// Answer writes resp to the client through w: the one writer of every
// answer, on the plain port and inside intercepted tunnels, HTTP/1 and
// HTTP/2 (docs/behaviour.md §5.5). It copies exactly the headers resp
// carries (the caller has removed hop-by-hop headers, and x-nora-* came
// only from the proxy) and its trailers, less the proxy's own namespace,
// and adds none of its own: net/http's Content-Type sniffing and its Date
// are suppressed for an answer that has neither. The
// body is streamed through a pooled buffer and flushed whenever the
// upstream had less than a buffer's worth ready; a body the upstream breaks
// off aborts the connection (or stream), so the client never takes a short
// body for a whole one. A 101 the caller accepted hands the connection to
// the byte relay. resp.Body is closed when Answer returns.
//
// An early answer, written while the client is still sending its request
// body (an upstream's 401 to a PUT with Expect: 100-continue), goes out at
// once: on HTTP/1 with Connection: close, and the connection stops reading
// the rest of the body instead of waiting for it, as net/http would.
func Answer(w http.ResponseWriter, req *http.Request, resp *http.Response, o Options) {
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		switchProtocols(w, resp, o)
		return
	}
	// On HTTP/2 an unread request body never holds the answer back: the
	// stream is reset, the connection stays.
	early := o.Body.Unread() && req.ProtoMajor == 1
	hdr := w.Header()
	for k, vv := range resp.Header {
		hdr[k] = vv
	}
	if _, ok := resp.Header["Content-Type"]; !ok {
		hdr["Content-Type"] = nil // no sniffing: what the upstream did not say stays unsaid
	}
	if _, ok := resp.Header["Date"]; !ok {
		hdr["Date"] = nil
	}
	if resp.ContentLength >= 0 && hdr.Get("Content-Length") == "" {
		hdr.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	ctl := http.NewResponseController(w)
	if early {
		hdr.Set("Connection", "close")
	}
	w.WriteHeader(resp.StatusCode)
	if early {
		_ = ctl.Flush()
		// The rest of the request body is never read: net/http would
		// otherwise wait for it before finishing the answer.
		defer func() { _ = ctl.SetReadDeadline(time.Now()) }()
	}
	bp := o.Bufs.forBody(resp.ContentLength)
	defer o.Bufs.putBody(bp)
	dw := &deadlineWriter{w: w, ctl: ctl, idle: o.Idle}
	defer dw.clear()
	_, readErr, writeErr := streamBody(dw, func() { _ = ctl.Flush() }, resp.Body, *bp)
	if writeErr != nil {
		return
	}
	if readErr != nil {
		// The upstream broke off: end the connection (or stream) so the
		// client sees a truncated body, never a short one that looks whole.
		panic(http.ErrAbortHandler)
	}
	// Trailers are an upstream's alone (the proxy sets none), coalesced
	// clients' copies included, and their values arrive only now, at the
	// body's end, long after attempt cleaned the answer's headers: this is
	// where an upstream's x-nora-* trailer is kept from the client.
	for k, vv := range resp.Trailer {
		if attempt.OwnHeader(k) {
			continue
		}
		for _, v := range vv {
			hdr.Add(http.TrailerPrefix+k, v)
		}
	}
}

// switchProtocols hands a connection whose upstream switched protocols (a
// 101 that answered a request asking for it) over to the byte relay.
func switchProtocols(w http.ResponseWriter, resp *http.Response, o Options) {
	upstream, ok := resp.Body.(io.ReadWriteCloser)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if !ok || err != nil {
		http.Error(w, "nora-breaker: cannot switch protocols here", http.StatusBadGateway)
		return
	}
	if o.Hijacked != nil {
		defer o.Hijacked()
	}
	defer conn.Close()
	clientconn.MarkHijacked(conn) // what follows is the new protocol, not HTTP/1
	head := *resp
	head.Body = nil
	if head.Write(brw) != nil || brw.Flush() != nil {
		return
	}
	// What the client sent behind its request head is read first: either
	// still in net/http's reader, or (when the hijacker moved it) in conn.
	var fromClient io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		fromClient = io.MultiReader(io.LimitReader(brw.Reader, int64(n)), conn)
	}
	Switched(conn, fromClient, upstream, o.Drainers)
}

// deadlineWriter moves an answer's write deadline idle ahead before its
// writes. It refreshes at most every idle/8, so the deadline it leaves lies
// between 7/8 and 8/8 of idle ahead, without a deadline call per write.
type deadlineWriter struct {
	w    io.Writer
	ctl  *http.ResponseController
	idle time.Duration
	last time.Time
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	if d.idle > 0 {
		if now := time.Now(); now.Sub(d.last) >= d.idle/8 {
			_ = d.ctl.SetWriteDeadline(now.Add(d.idle))
			d.last = now
		}
	}
	return d.w.Write(p)
}

// clear removes the deadline, so it cannot outlive the answer and cut the
// next one on a kept-alive connection.
func (d *deadlineWriter) clear() {
	if !d.last.IsZero() {
		_ = d.ctl.SetWriteDeadline(time.Time{})
	}
}
