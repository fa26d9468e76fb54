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
// shutdown drains every connection kind alike (docs/behaviour.md §10).
// Safe for concurrent use; the zero value is ready.
type Drainers struct {
	mu       sync.Mutex
	live     map[*drainEntry]struct{}
	draining context.Context // set once Drain began
	closed   *atomic.Int64   // how many the drain had to close
	wg       sync.WaitGroup  // the drains running
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

// Len is the number of live connections.
func (ds *Drainers) Len() int {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return len(ds.live)
}

// Drain drains every live connection (and every one added meanwhile)
// until all have ended or ctx is done; each one left then is closed. It
// reports how many it had to close.
func (ds *Drainers) Drain(ctx context.Context) (closed int) {
	var n atomic.Int64
	ds.mu.Lock()
	ds.draining = ctx
	ds.closed = &n
	for e := range ds.live {
		ds.drainOne(ctx, e)
	}
	ds.mu.Unlock()
	ds.wg.Wait()
	return int(n.Load())
}

// drainOne drains e in a goroutine of its own until it ends, and closes
// it if ctx is done first. The caller holds mu.
func (ds *Drainers) drainOne(ctx context.Context, e *drainEntry) {
	closed := ds.closed
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
