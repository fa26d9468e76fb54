package coalesce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/synctest"
)

// result is what one client got.
type result struct {
	out    Outcome[string]
	err    error
	digest string
	n      int64
	readE  error
}

// clients starts n clients of key, each reading its whole body, and
// returns their results once all are done. Each client's context comes
// from ctxs[i] when given.
func clients(g *Group[string], f *fetch, key string, n int, ctxs []context.Context) func() []result {
	res := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		ctx := context.Background()
		if i < len(ctxs) && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		wg.Go(func() {
			r := &res[i]
			r.out, r.err = g.Do(call(ctx, key, nil), f.fn)
			if r.err != nil {
				return
			}
			r.digest, r.n, r.readE = readDigest(r.out.Resp.Body)
			r.out.Resp.Body.Close()
		})
	}
	return func() []result { wg.Wait(); return res }
}

// TestOneFetchForIdenticalRequests: twenty clients of one key that arrive
// while the fetch waits for its headers share it: one call of fn, and every
// client gets the whole body, whether it fits the memory head or needs the
// spool file.
func TestOneFetchForIdenticalRequests(t *testing.T) {
	for _, size := range []int64{0, 10 << 10, 3<<20 + 17} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, _ := newGroup(t, 64<<20)
				f := newFetch(size)
				wait := clients(g, f, "k", 20, nil)
				synctest.Wait()
				if got := g.waiting("k"); got != 20 {
					t.Fatalf("waiting: %d, want 20", got)
				}
				close(f.gate)
				want := digestOf(size)
				joined := 0
				for i, r := range wait() {
					if r.err != nil || r.readE != nil || r.digest != want || r.n != size {
						t.Errorf("client %d: err %v, read %v, %d bytes, digest ok %v", i, r.err, r.readE, r.n, r.digest == want)
					}
					if r.out.Value != "call 1" {
						t.Errorf("client %d: value %q, want the one fetch's", i, r.out.Value)
					}
					if r.out.Joined {
						joined++
					}
				}
				if f.calls.Load() != 1 || joined != 19 || coalesced(t, g, "maven") != 19 {
					t.Errorf("calls %d, joined %d, counted %d; want 1, 19, 19", f.calls.Load(), joined, coalesced(t, g, "maven"))
				}
				if g.inFlight() != 0 {
					t.Errorf("%d fetches left in flight", g.inFlight())
				}
			})
		})
	}
}

// TestBusyAndDeciding: a group is busy exactly while some fetch is in
// flight, and Deciding names that fetch's key alone.
func TestBusyAndDeciding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGroup(t, 64<<20)
		if g.Busy() || g.Deciding(nil, "k") {
			t.Fatal("a new group is busy")
		}
		f := newFetch(10)
		wait := clients(g, f, "k", 1, nil)
		synctest.Wait()
		if !g.Busy() || !g.Deciding(nil, "k") || g.Deciding(nil, "other") || g.Deciding("another scope", "k") {
			t.Fatalf("with k's fetch in flight: busy %v, deciding k %v, other %v, k in another scope %v",
				g.Busy(), g.Deciding(nil, "k"), g.Deciding(nil, "other"), g.Deciding("another scope", "k"))
		}
		close(f.gate)
		wait()
		if g.Busy() || g.Deciding(nil, "k") {
			t.Fatal("busy after the fetch ended")
		}
	})
}

// TestJoinWindow: a client that arrives while the body streams joins the
// fetch and gets it from its first byte as long as the one client reading
// it has not asked for more than the join window (the first headBytes, kept
// in memory); after that the first client reads on without keeping the body,
// and the late one fetches for itself. Both get the whole body either way.
func TestJoinWindow(t *testing.T) {
	for _, c := range []struct {
		name   string
		readTo int64 // how far the first client has read when the second comes
		joins  bool
	}{
		{"within the window", headBytes / 2, true},
		// The first client has all of the window and asks for more: the
		// window closes then, before the next byte has come.
		{"at its end", headBytes, false},
		{"far past it", 1 << 20, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, _ := newGroup(t, 64<<20)
				const size = 2 << 20
				f := newFetch(size)
				f.gate, f.upTo = nil, c.readTo
				first := clients(g, f, "k", 1, nil)
				synctest.Wait() // the first client has read all the source gave
				if !c.joins && (g.room.reserved != 0 || g.inFlight() != 0) {
					t.Fatalf("past the window, alone: %d bytes of room still reserved, %d fetches open to joining",
						g.room.reserved, g.inFlight())
				}
				late := clients(g, f, "k", 1, nil)
				synctest.Wait()
				f.src(0).release(-1)
				if !c.joins {
					f.src(1).release(-1)
				}
				want := digestOf(size)
				for i, r := range append(first(), late()...) {
					if r.digest != want || r.n != size || r.readE != nil || r.out.Joined != (i == 1 && c.joins) {
						t.Errorf("client %d: %d bytes, joined %v, %v", i, r.n, r.out.Joined, r.readE)
					}
				}
				wantCalls := int64(1)
				if !c.joins {
					wantCalls = 2
				}
				if f.calls.Load() != wantCalls {
					t.Errorf("calls %d, want %d", f.calls.Load(), wantCalls)
				}
				if g.inFlight() != 0 || g.room.reserved != 0 {
					t.Errorf("%d fetches left in flight, %d bytes of room reserved", g.inFlight(), g.room.reserved)
				}
			})
		})
	}
}

// TestStoppedFollowerStallsNobody: one client reads a little and then
// stops reading without closing its body; the fetch still reads the
// upstream to its end, and every other client gets its whole body
// meanwhile. The stopped client, reading on later, gets the rest.
func TestStoppedFollowerStallsNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGroup(t, 64<<20)
		const size = 8 << 20
		f := newFetch(size)
		var stuck Outcome[string]
		go func() {
			var err error
			if stuck, err = g.Do(call(context.Background(), "k", nil), f.fn); err != nil {
				t.Error(err)
			}
		}()
		synctest.Wait()
		others := clients(g, f, "k", 5, nil)
		synctest.Wait()
		close(f.gate)
		synctest.Wait()
		head := make([]byte, 100)
		if _, err := io.ReadFull(stuck.Resp.Body, head); err != nil {
			t.Fatal(err)
		}
		want := digestOf(size)
		for i, r := range others() {
			if r.digest != want || r.readE != nil {
				t.Errorf("client %d: %d bytes, %v", i, r.n, r.readE)
			}
		}
		synctest.Wait()
		if !f.src(0).ended.Load() || g.inFlight() != 0 {
			t.Errorf("upstream body read to its end %v, in flight %d: the stopped client held the fetch back",
				f.src(0).ended.Load(), g.inFlight())
		}
		d, n, rerr := readDigest(io.MultiReader(bytes.NewReader(head), stuck.Resp.Body))
		stuck.Resp.Body.Close()
		if d != want || rerr != nil {
			t.Errorf("the stopped client, reading on: %d bytes, %v", n, rerr)
		}
	})
}

// TestFirstClientLeavingMidBody: the client whose request started the
// fetch goes away in the middle of the body; the fetch goes on and the
// others' bodies are whole (digest checked).
func TestFirstClientLeavingMidBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGroup(t, 64<<20)
		const size = 4 << 20
		f := newFetch(size)
		f.upTo = size / 3
		leaderCtx, leave := context.WithCancel(context.Background())
		leader := clients(g, f, "k", 1, []context.Context{leaderCtx})
		synctest.Wait()
		others := clients(g, f, "k", 4, nil)
		synctest.Wait()
		close(f.gate)
		synctest.Wait() // everyone has read the first third and waits for more
		leave()
		synctest.Wait()
		f.src(0).release(-1)
		want := digestOf(size)
		for i, r := range others() {
			if r.digest != want || r.n != size || r.readE != nil {
				t.Errorf("client %d: %d bytes, %v", i, r.n, r.readE)
			}
		}
		if l := leader()[0]; l.readE == nil || l.n >= size {
			t.Errorf("the client that left read %d bytes, ending %v", l.n, l.readE)
		}
		if !f.src(0).ended.Load() || f.calls.Load() != 1 {
			t.Errorf("upstream body read to its end %v, calls %d", f.src(0).ended.Load(), f.calls.Load())
		}
	})
}

// TestLastClientGoneCancelsFetch: the fetch is cancelled when the last
// client waiting for it has gone, before its headers and during its body;
// while one still waits, it goes on.
func TestLastClientGoneCancelsFetch(t *testing.T) {
	t.Run("before the headers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, _ := newGroup(t, 64<<20)
			f := newFetch(1 << 20)
			ctxA, leaveA := context.WithCancel(context.Background())
			ctxB, leaveB := context.WithCancel(context.Background())
			wait := clients(g, f, "k", 2, []context.Context{ctxA, ctxB})
			synctest.Wait()
			leaveA()
			synctest.Wait()
			if g.inFlight() != 1 {
				t.Fatal("the fetch ended while a client still waited for it")
			}
			leaveB()
			res := wait()
			for i, r := range res {
				if !errors.Is(r.err, errClientGone) {
					t.Errorf("client %d: %v, want it gone", i, r.err)
				}
			}
			synctest.Wait()
			if f.calls.Load() != 1 || g.inFlight() != 0 {
				t.Errorf("calls %d, in flight %d", f.calls.Load(), g.inFlight())
			}
		})
	})
	t.Run("during the body", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, _ := newGroup(t, 64<<20)
			f := newFetch(4 << 20)
			f.upTo = 1 << 20
			ctxA, leaveA := context.WithCancel(context.Background())
			ctxB, leaveB := context.WithCancel(context.Background())
			wait := clients(g, f, "k", 2, []context.Context{ctxA, ctxB})
			synctest.Wait()
			close(f.gate)
			synctest.Wait()
			leaveA()
			synctest.Wait()
			if err := f.ctx(0).Err(); err != nil {
				t.Fatalf("the fetch was cancelled while a client still read it: %v", err)
			}
			leaveB()
			wait()
			synctest.Wait()
			if cause := context.Cause(f.ctx(0)); !errors.Is(cause, errAllGone) {
				t.Errorf("the fetch's context: %v, want it cancelled for nobody left", cause)
			}
			if !f.src(0).closed.Load() || g.inFlight() != 0 {
				t.Errorf("upstream body closed %v, in flight %d", f.src(0).closed.Load(), g.inFlight())
			}
		})
	})
}

// TestDriverReadsOnAfterHandOver: once a second client has joined, the
// client that read the upstream itself reads what the pump has spooled,
// while the upstream still holds the rest back; it never waits for the
// pump to have the whole body.
func TestDriverReadsOnAfterHandOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGroup(t, 64<<20)
		const size, held = 4 << 20, 1 << 20
		f := newFetch(size)
		f.gate, f.upTo = nil, 16<<10 // within the join window
		var first Outcome[string]
		go func() { first, _ = g.Do(call(context.Background(), "k", nil), f.fn) }()
		synctest.Wait()
		head := make([]byte, 16<<10)
		if _, err := io.ReadFull(first.Resp.Body, head); err != nil {
			t.Fatal(err)
		}
		late := clients(g, f, "k", 1, nil)
		synctest.Wait() // the pump has the body
		f.src(0).release(held)
		synctest.Wait()
		// Everything up to what the upstream let through can be read now;
		// a driver waiting for the pump to finish would block here.
		if _, err := io.ReadFull(first.Resp.Body, make([]byte, held-len(head))); err != nil {
			t.Fatal(err)
		}
		f.src(0).release(-1)
		d, n, err := readDigest(first.Resp.Body)
		first.Resp.Body.Close()
		if r := late()[0]; r.digest != digestOf(size) || err != nil || n != size-held {
			t.Errorf("late client %d bytes, %v; first read %d more, %v (digest %s)", r.n, r.readE, n, err, d)
		}
	})
}

// TestFreshJoinsOnlyBeforeTheAnswer: a no-cache request (Maven's resolver
// sends one for every pull) joins a fetch still waiting for its answer,
// which is made after the request was sent; once that answer has come, it
// fetches for itself, while a request without no-cache still joins.
func TestFreshJoinsOnlyBeforeTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGroup(t, 64<<20)
		const size = 10 << 10
		f := newFetch(size)
		f.upTo = size / 2 // the body streams until the test lets it end
		fresh := func(ctx context.Context) Call { c := call(ctx, "k", nil); c.Fresh = true; return c }
		outs := make([]Outcome[string], 4)
		var wg sync.WaitGroup
		do := func(i int, c Call) {
			wg.Go(func() {
				out, err := g.Do(c, f.fn)
				if err != nil {
					t.Error(err)
					return
				}
				if d, _, err := readDigest(out.Resp.Body); d != digestOf(size) || err != nil {
					t.Errorf("client %d: %v", i, err)
				}
				out.Resp.Body.Close()
				outs[i] = out
			})
		}
		do(0, call(context.Background(), "k", nil))
		synctest.Wait()
		do(1, fresh(context.Background())) // before the answer: joins
		synctest.Wait()
		close(f.gate)
		synctest.Wait()                             // the answer is there, half its body read
		do(2, fresh(context.Background()))          // after it: a fetch of its own
		do(3, call(context.Background(), "k", nil)) // still joins
		synctest.Wait()
		for i := range f.calls.Load() {
			f.src(int(i)).release(-1)
		}
		wg.Wait()
		if !outs[1].Joined || outs[1].Value != "call 1" {
			t.Errorf("no-cache before the answer: %q, joined %v; want the first fetch", outs[1].Value, outs[1].Joined)
		}
		if outs[2].Joined || outs[2].Value != "call 2" {
			t.Errorf("no-cache after the answer: %q, joined %v; want a fetch of its own", outs[2].Value, outs[2].Joined)
		}
		if !outs[3].Joined || outs[3].Value != "call 1" {
			t.Errorf("plain request after the answer: %q, joined %v; want the first fetch", outs[3].Value, outs[3].Joined)
		}
	})
}

// TestWaitingCountsTheFetchsClients: the fetch's context tells how many
// clients wait on it (what a silent attempt counts for, early opening),
// and any other context one request.
func TestWaitingCountsTheFetchsClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGroup(t, 64<<20)
		f := newFetch(1 << 10)
		wait := clients(g, f, "k", 7, nil)
		synctest.Wait()
		if n := Waiting(f.ctx(0)); n != 7 {
			t.Errorf("Waiting in the fetch: %d, want 7", n)
		}
		if n := Waiting(context.Background()); n != 1 {
			t.Errorf("Waiting outside any fetch: %d, want 1", n)
		}
		close(f.gate)
		wait()
	})
}
