package relay

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ClientBody is a client's request body as the proxy reads it on its way
// upstream. Each Read that waits on the client may wait at most the idle
// timeout (docs/behaviour.md §5.1: the client's pauses are the client's, so
// a stalled upload fails as the client's own fault, never as the
// upstream's), and the body remembers whether it was read to its end, which
// decides how an early answer is written (Answer).
type ClientBody struct {
	rc   io.ReadCloser
	ctl  *http.ResponseController
	idle time.Duration
	h1   bool // the client's request came over HTTP/1

	// A transport may Close the body while its Read is under way, and
	// after the handler has returned (x/net's HTTP/2 transport closes it
	// from a goroutine of its own when an answer ends the upload early),
	// so the deadline's state is guarded: last is when it was last moved,
	// closed stops a Read from moving it once Close has cleared it, and
	// finished (Finish) stops every use of the ResponseController, which is
	// the handler's only while it runs.
	mu       sync.Mutex
	last     time.Time
	closed   bool
	finished bool

	ended atomic.Bool
}

// WatchClientBody installs a ClientBody on req when it has a body, and
// returns it (nil for a request without one). w is the request's own
// ResponseWriter, whose read deadline bounds each wait; idle <= 0 sets none.
// The handler calls Finish before it returns.
func WatchClientBody(w http.ResponseWriter, req *http.Request, idle time.Duration) *ClientBody {
	if req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	b := &ClientBody{rc: req.Body, ctl: http.NewResponseController(w), idle: idle, h1: req.ProtoMajor == 1}
	req.Body = b
	return b
}

// Finish says the handler is returning: from then on the body never
// touches the connection's deadline (net/http sets its own for the next
// request; an HTTP/2 stream's writer is gone). A deadline call under way
// ends before Finish returns. b may be nil.
func (b *ClientBody) Finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.finished = true
	b.mu.Unlock()
}

// Read reads the client's body. The read deadline moves idle ahead at most
// every idle/8, so one slow client costs no deadline call per read.
func (b *ClientBody) Read(p []byte) (int, error) {
	if b.idle > 0 {
		now := time.Now()
		b.mu.Lock()
		if !b.closed && !b.finished && now.Sub(b.last) >= b.idle/8 {
			_ = b.ctl.SetReadDeadline(now.Add(b.idle))
			b.last = now
		}
		b.mu.Unlock()
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.ended.Store(true)
		b.clearDeadline(false)
	}
	return n, err
}

// Close closes the body. The deadline is cleared first: left in place it
// would cut net/http's own reads of the connection (the next request's head,
// the background read that notices a client leaving) while the answer is
// still being written.
//
// An HTTP/1 body not read to its end is another matter: net/http's Close
// drains what is left of it to keep the connection, reading from the
// client, and a client that has stalled would hold that drain, and the
// transport goroutine that called Close (x/net's, which ends the upstream
// stream only after), for as long as its connection stays open. The drain
// gets the idle timeout, the client's own timer, like every wait on its
// body. (An HTTP/2 body's Close reads nothing.)
func (b *ClientBody) Close() error {
	if b.h1 && !b.ended.Load() && b.idle > 0 {
		b.mu.Lock()
		b.closed = true
		if !b.finished {
			_ = b.ctl.SetReadDeadline(time.Now().Add(b.idle))
			b.last = time.Now()
		}
		b.mu.Unlock()
		err := b.rc.Close()
		b.clearDeadline(true)
		return err
	}
	b.clearDeadline(true)
	return b.rc.Close()
}

// clearDeadline clears the read deadline a Read set; closing, no Read sets
// one again.
func (b *ClientBody) clearDeadline(closing bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = b.closed || closing
	if !b.last.IsZero() && !b.finished {
		_ = b.ctl.SetReadDeadline(time.Time{})
	}
	b.last = time.Time{}
}

// Unread reports a body the client has not finished sending (or the proxy
// has not finished reading): an answer written now is an early answer.
func (b *ClientBody) Unread() bool { return b != nil && !b.ended.Load() }
