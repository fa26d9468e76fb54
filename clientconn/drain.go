package clientconn

import (
	"context"
	"sync"
	"sync/atomic"
)

// Drainer is a client connection that has left net/http's own bookkeeping,
// which http.Server.Shutdown therefore never waits for: a blind tunnel, an
// intercepted connection (served by a server of its own), a protocol
// switch. Drain ends it gracefully and returns once it has ended or ctx is
// done; Close ends it at once.
type Drainer interface {
	Drain(ctx context.Context)
	Close() error
}

// Drainers holds the hijacked connections that are alive, so that a
// shutdown drains every connection kind alike (docs/behaviour.md §8).
// Safe for concurrent use; the zero value is ready.
type Drainers struct {
	mu       sync.Mutex
	live     map[*drainEntry]struct{}
	draining context.Context // set once Drain began
	closed   *atomic.Int64   // how many the drain had to close
	wg       sync.WaitGroup  // the drains running
	// held counts the handlers in flight that may yet add a connection
	// (Hold); released, when set, is closed as the count drops to zero.
	held     int
	released chan struct{}
}

type drainEntry struct {
	d    Drainer
	done chan struct{}
}

// Add registers d and returns the function that says it has ended. A
// connection added once a drain has begun is drained at once.
func (ds *Drainers) Add(d Drainer) (ended func()) {
	if ds == nil {
		return func() {} // nobody drains: a server of a test's own
	}
	e := &drainEntry{d: d, done: make(chan struct{})}
	ds.mu.Lock()
	if ds.live == nil {
		ds.live = map[*drainEntry]struct{}{}
	}
	ds.live[e] = struct{}{}
	if ctx := ds.draining; ctx != nil {
		ds.drainOne(ctx, e)
	}
	ds.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(e.done)
			ds.mu.Lock()
			delete(ds.live, e)
			ds.mu.Unlock()
		})
	}
}

// Hold marks a handler that may yet hand its connection over: a CONNECT
// (a blind tunnel still being dialled, an intercepted one still in its
// handshake) or a request asking to switch protocols. net/http's shutdown
// stops counting such a connection once it is hijacked, before Add is
// called for it, so until release a drain does not end: a connection added
// late is drained like the others instead of being cut when the process
// exits.
func (ds *Drainers) Hold() (release func()) {
	if ds == nil {
		return func() {}
	}
	ds.mu.Lock()
	ds.held++
	ds.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			ds.mu.Lock()
			defer ds.mu.Unlock()
			ds.held--
			if ds.held == 0 && ds.released != nil {
				close(ds.released)
				ds.released = nil
			}
		})
	}
}

// Len is the number of live connections.
func (ds *Drainers) Len() int {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return len(ds.live)
}

// Drain drains every live connection, and every one added until no handler
// can add another: quiet is closed once the servers that start handlers
// have stopped, and then the held ones (Hold) are waited for. It returns
// when all have ended or ctx is done; each one left then is closed. It
// reports how many it had to close.
func (ds *Drainers) Drain(ctx context.Context, quiet <-chan struct{}) (closed int) {
	var n atomic.Int64
	ds.mu.Lock()
	ds.draining = ctx
	ds.closed = &n
	for e := range ds.live {
		ds.drainOne(ctx, e)
	}
	ds.mu.Unlock()
	select {
	case <-quiet:
		ds.waitHeld(ctx)
	case <-ctx.Done():
	}
	ds.wg.Wait()
	return int(n.Load())
}

// waitHeld returns once no handler is held, or when ctx is done.
func (ds *Drainers) waitHeld(ctx context.Context) {
	ds.mu.Lock()
	if ds.held == 0 {
		ds.mu.Unlock()
		return
	}
	released := make(chan struct{})
	ds.released = released
	ds.mu.Unlock()
	select {
	case <-released:
	case <-ctx.Done():
	}
}

// drainOne drains e in a goroutine of its own until it ends, and closes
// it if ctx is done first; once ctx is done it closes e at once, as Drain
// may have stopped waiting. The caller holds mu.
func (ds *Drainers) drainOne(ctx context.Context, e *drainEntry) {
	closed := ds.closed
	if ctx.Err() != nil {
		_ = e.d.Close()
		closed.Add(1)
		return
	}
	ds.wg.Add(1)
	go func() {
		defer ds.wg.Done()
		dctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			// A drain that waits for an end it cannot cause (a tunnel)
			// learns of it here.
			select {
			case <-e.done:
				cancel()
			case <-dctx.Done():
			}
		}()
		e.d.Drain(dctx)
		select {
		case <-e.done:
		case <-ctx.Done():
			select {
			case <-e.done:
			default:
				_ = e.d.Close()
				closed.Add(1)
			}
		}
	}()
}
