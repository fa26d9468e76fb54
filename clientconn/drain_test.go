package clientconn

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeDrainer ends when told (or, if graceful, as soon as it is drained)
// and counts its closes.
type fakeDrainer struct {
	graceful bool
	end      func()
	closed   atomic.Int32
}

func (f *fakeDrainer) Drain(ctx context.Context) {
	if f.graceful {
		f.end()
		return
	}
	<-ctx.Done()
}

func (f *fakeDrainer) Close() error { f.closed.Add(1); return nil }

// TestDrainersDrainEveryKind: a connection that ends gracefully when
// drained, one that ends on its own during the grace period, one added
// during the drain, and one that outlasts the grace, which alone is closed.
func TestDrainersDrainEveryKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ds Drainers
		graceful := &fakeDrainer{graceful: true}
		graceful.end = ds.Add(graceful)
		selfEnding := &fakeDrainer{}
		endSelf := ds.Add(selfEnding)
		stuck := &fakeDrainer{}
		ds.Add(stuck)
		go func() {
			time.Sleep(time.Second)
			endSelf()
		}()
		late := &fakeDrainer{}
		go func() {
			time.Sleep(500 * time.Millisecond)
			endLate := ds.Add(late)
			time.Sleep(time.Second)
			endLate()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if n := ds.Drain(ctx, closedChan()); n != 1 {
			t.Fatalf("closed %d connections, want 1 (the one that outlasted the grace)", n)
		}
		if took := time.Since(start); took != 5*time.Second {
			t.Fatalf("the drain took %v, want the 5 s grace", took)
		}
		if graceful.closed.Load() != 0 || selfEnding.closed.Load() != 0 || late.closed.Load() != 0 {
			t.Fatal("a connection that ended in time was closed")
		}
		if stuck.closed.Load() != 1 {
			t.Fatal("the connection that outlasted the grace was not closed")
		}
		if ds.Len() != 1 { // stuck never said it ended; closing it is all the drain can do
			t.Fatalf("%d live after the drain", ds.Len())
		}
	})
}

// TestDrainersReturnAsSoonAsAllEnded: nothing waits for the grace period
// once every connection has ended.
func TestDrainersReturnAsSoonAsAllEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ds Drainers
		d := &fakeDrainer{}
		end := ds.Add(d)
		go func() {
			time.Sleep(2 * time.Second)
			end()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		if n := ds.Drain(ctx, closedChan()); n != 0 || time.Since(start) != 2*time.Second {
			t.Fatalf("closed %d after %v, want none after 2 s", n, time.Since(start))
		}
	})
}

// closedChan is the quiet of a drain whose servers have already stopped.
func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TestDrainWaitsForHeldHandlers: a handler that was held when the drain
// began (a CONNECT still dialling, a websocket handshake waiting for its
// 101) hands its connection over only later, after every connection known
// at the start has ended and after the server stopped. The drain waits for
// it and drains that connection too, where it used to return at once and
// leave it to be cut. A handler that starts before the server stops is
// waited for the same way.
func TestDrainWaitsForHeldHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ds Drainers
		releaseDialling := ds.Hold()
		stopped := make(chan struct{})
		late := &fakeDrainer{}
		lateEnded := make(chan struct{})
		go func() {
			time.Sleep(time.Second) // the dial completes during the drain
			end := ds.Add(late)
			releaseDialling()
			time.Sleep(3 * time.Second) // the download through the tunnel
			end()
			close(lateEnded)
		}()
		switched := &fakeDrainer{}
		go func() {
			// A handshake whose head was read as the drain began: its
			// handler starts before the server has stopped.
			time.Sleep(500 * time.Millisecond)
			release := ds.Hold()
			close(stopped)
			time.Sleep(2 * time.Second) // the upstream's 101 comes late
			end := ds.Add(switched)
			release()
			time.Sleep(3 * time.Second)
			end()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		if n := ds.Drain(ctx, stopped); n != 0 {
			t.Fatalf("closed %d, want none", n)
		}
		if took := time.Since(start); took != 5500*time.Millisecond {
			t.Fatalf("the drain ended after %v, want 5.5 s: when the last connection a held handler added ended", took)
		}
		select {
		case <-lateEnded:
		default:
			t.Fatal("the drain ended before the tunnel added late")
		}
		if late.closed.Load() != 0 || switched.closed.Load() != 0 {
			t.Fatal("a connection that ended in time was closed")
		}
	})
}

// TestDrainStopsWaitingForHeldHandlersAtTheGrace: a handler still held when
// the grace ends does not keep the drain, and what it adds afterwards is
// closed at once.
func TestDrainStopsWaitingForHeldHandlersAtTheGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ds Drainers
		release := ds.Hold()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if n := ds.Drain(ctx, closedChan()); n != 0 || time.Since(start) != 5*time.Second {
			t.Fatalf("closed %d after %v, want none after the 5 s grace", n, time.Since(start))
		}
		tooLate := &fakeDrainer{}
		ds.Add(tooLate)
		release()
		if tooLate.closed.Load() != 1 {
			t.Fatal("a connection added after the grace was not closed")
		}
	})
}
