package coalesce

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
)

// flight is one fetch and the clients waiting for it or reading its answer.
type flight[T any] struct {
	g   *Group[T]
	key flightKey
	// header is the first client's request headers, for an answer's Vary:
	// its own map until the answer is there (the client's Do is running
	// then), a copy after, if the answer varies at all.
	header http.Header
	ctx    context.Context
	cancel context.CancelCauseFunc
	ready  chan struct{} // closed once the fields below are set

	// Set before ready is closed, read only after.
	head *http.Response // the answer as every client gets it, without a body
	val  T
	sp   *spool // nil: the answer goes to one client as it came
	// orig is the answer as fn returned it: without a spool it goes to one
	// client as it is; otherwise only the driver or the pump reads its
	// body.
	orig *http.Response

	mode atomic.Int32

	// up is held (a token in it) by the driver during each of its reads
	// of the upstream's body, and by the pump while it takes the body
	// over and ends it. Guarded by it: upDone, pumping, teeStopped. A
	// channel rather than a mutex, so that a pump waiting for the
	// driver's read counts as blocked for testing/synctest.
	up chan struct{}
	// upDone: the upstream's body has ended (or was dropped) and closed.
	upDone bool
	// pumping: the pump has the body; only it reads it from now on.
	pumping bool
	// teeStopped: the spool could not keep up with the driver (no room,
	// a disk error); the driver reads on alone and nobody may join.
	teeStopped bool

	released sync.Once

	// Guarded by g.mu.
	waiters int  // clients waiting for the answer or reading it
	settled bool // the answer is there (ready is about to close)
	taken   bool // the one client of an answer without a spool took it
	driven  bool // modeTee: the driver has taken its body
	pumped  bool // the upstream's body has ended and the spool holds its end
	closed  bool // no client may join any more (teeStopped)
}

func (g *Group[T]) newFlight(fk flightKey, c Call) *flight[T] {
	// The fetch keeps the first client's values (its place in the proxy),
	// never its cancellation: it belongs to every client waiting for it.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(c.Ctx))
	f := &flight[T]{g: g, key: fk, header: c.Header, cancel: cancel, ready: make(chan struct{}),
		up: make(chan struct{}, 1)}
	f.ctx = context.WithValue(ctx, waitingKey{}, f.waiting)
	return f
}

// waitingKey is the context key of Waiting.
type waitingKey struct{}

// Waiting returns how many clients wait for, or read, the fetch whose
// context ctx is (what fn of Group.Do is called with), or 1 for any other
// context: a request fetching for itself.
func Waiting(ctx context.Context) int {
	if n, ok := ctx.Value(waitingKey{}).(func() int); ok {
		return n()
	}
	return 1
}

// waiting is the number of clients waiting for the answer or reading it.
func (f *flight[T]) waiting() int {
	f.g.mu.Lock()
	defer f.g.mu.Unlock()
	return f.waiters
}

// run makes the fetch and settles how its answer is shared.
func (f *flight[T]) run(fn func(context.Context) (*http.Response, T)) {
	resp, v := f.call(fn)
	var sp *spool
	if resp != nil {
		if resp.Body == nil {
			resp.Body = http.NoBody
		}
		sp = f.spoolFor(resp)
	}
	g := f.g
	g.mu.Lock()
	f.orig, f.val, f.sp, f.settled = resp, v, sp, true
	if resp != nil {
		// The answer's own header map stays the flight's, never changed:
		// every client gets a copy of it.
		head := *resp
		head.Trailer, head.Body = nil, nil
		f.head = &head
		if len(resp.Header.Values("Vary")) > 0 {
			f.header = f.header.Clone()
		} else {
			f.header = nil
		}
	}
	if sp != nil {
		f.mode.Store(modeTee)
	}
	alive := f.waiters > 0
	if sp == nil || !alive {
		// Nobody else may join an answer that goes to one client, or to
		// none: the next identical request starts a fetch of its own.
		f.forgetLocked()
	}
	g.mu.Unlock()
	close(f.ready)
	if !alive {
		// Every client left before the answer came, which cancelled the
		// fetch: nobody reads it.
		if resp != nil {
			resp.Body.Close()
		}
		f.release()
	}
}

// call runs fn; a panic in it is logged and leaves no answer, so each
// client then makes its own fetch and meets the panic where its own
// request is recovered.
func (f *flight[T]) call(fn func(context.Context) (*http.Response, T)) (resp *http.Response, v T) {
	defer func() {
		if p := recover(); p != nil {
			f.g.log.Error().Str("panic", fmt.Sprint(p)).Msg("coalesce: a shared fetch panicked; its clients fetch for themselves")
			resp = nil
		}
	}()
	return fn(f.ctx)
}

// spoolFor makes the spool resp's body is shared through, or nil when it
// goes to one client as it is: a protocol switch; a body over the bound
// while no second client waits for it (a single large download streams as
// it comes, and costs no disk); a body the room cannot hold; a spool file
// that cannot be made.
func (f *flight[T]) spoolFor(resp *http.Response) *spool {
	g := f.g
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	want := resp.ContentLength
	if resp.Body == http.NoBody {
		want = 0
	}
	if want > g.bound {
		g.mu.Lock()
		alone := f.waiters < 2
		g.mu.Unlock()
		if alone {
			return nil
		}
	}
	sp, err := newSpool(g.dir, want)
	if err != nil {
		g.warnSpool(err)
		return nil
	}
	if !sp.onDisk() {
		return sp
	}
	to := want
	if want < 0 {
		to = g.bound
		sp.grow = func(s *spool, need int64) bool { return g.room.reserve(s, g.room.grown(need)) }
	}
	if !g.room.reserve(sp, to) {
		sp.close()
		return nil
	}
	return sp
}

// take gives client c its answer, or reports that it cannot share this
// one (c then fetches for itself). joined: c is not the client whose
// request the fetch made.
func (f *flight[T]) take(c Call, joined bool) (*http.Response, bool) {
	if f.head == nil || !sameVariant(f.head.Header, f.header, c.Header) {
		return nil, false
	}
	if f.sp != nil {
		return f.reader(c, joined)
	}
	g := f.g
	g.mu.Lock()
	taken := f.taken
	f.taken = true
	g.mu.Unlock()
	if taken {
		return nil, false
	}
	resp := f.orig
	if joined {
		// f.head shares the map, which other clients' take still reads.
		resp.Header = resp.Header.Clone()
		dropSessions(resp.Header)
	}
	resp.Body = newDirectBody(f, c.Ctx, resp.Body)
	return resp, true
}

// dropSessions removes from a joined client's copy of the answer the
// session the upstream opened for the request it was sent: that is the
// client's whose request it was (docs/behaviour.md §5.9), just as the
// stale cache keeps no Set-Cookie and another upstream's is dropped.
func dropSessions(h http.Header) {
	delete(h, "Set-Cookie")
	delete(h, "Set-Cookie2")
}

// reader is c's own copy of a spooled answer. The first client to take it
// drives the upstream's body; the second hands the body over to the pump.
func (f *flight[T]) reader(c Call, joined bool) (*http.Response, bool) {
	g := f.g
	g.mu.Lock()
	if f.closed {
		g.mu.Unlock()
		return nil, false
	}
	driver := !f.driven
	f.driven = true
	handOver := !driver && f.mode.Load() == modeTee
	if handOver {
		f.mode.Store(modePump)
	}
	g.mu.Unlock()
	if handOver {
		go f.pump()
	}
	resp := new(http.Response)
	*resp = *f.head
	resp.Header = f.head.Header.Clone()
	if joined {
		dropSessions(resp.Header)
	}
	resp.Body = newSpoolBody(f, c.Ctx, resp, driver)
	return resp, true
}

// release gives back the spool's file and room and the fetch's context,
// once nothing needs them.
func (f *flight[T]) release() {
	f.released.Do(func() {
		if f.sp != nil {
			f.sp.close()
			f.g.room.release(f.sp)
		}
		f.cancel(nil)
	})
}

// leave is called once for every client that stops waiting for the fetch
// or reading its answer, whichever way. The last one to go ends the fetch
// if it is still under way, and releases what it holds.
func (f *flight[T]) leave() {
	g := f.g
	g.mu.Lock()
	f.waiters--
	last := f.waiters == 0
	if last {
		f.forgetLocked()
	}
	settled, pumped, taken := f.settled, f.pumped, f.taken
	g.mu.Unlock()
	switch {
	case !last:
	case !settled:
		// run sees nobody waiting and drops the answer.
		f.cancel(errAllGone)
	case f.sp != nil && !pumped:
		// Nobody wants the rest of the body: the cancel ends a read of
		// it in progress, then drop closes it.
		f.cancel(errAllGone)
		go f.drop()
	case f.sp != nil:
		f.release()
	case f.orig != nil && !taken:
		// An answer for one client that no client could take.
		f.orig.Body.Close()
		f.release()
	default:
		f.release()
	}
}
