package coalesce

// Who reads the upstream's body of a spooled answer. While one client has
// it, that client (the driver) reads it itself, each byte also kept in the
// spool, so a client alone fetches as it would without coalescing: at its own
// pace, the upstream held back when it stops reading, every verdict the
// same. The second client to take the answer hands the body over to the
// pump, which from then on reads it at the upstream's pace for everybody.
// Exactly one of them reads it at any time; the hand-over waits for the
// driver's read in progress.

import (
	"errors"
	"io"
)

// How a flight's spooled body reaches its clients (flight.mode; zero for
// an answer that goes to one client as it came, without a spool).
const (
	// modeTee: one client, the driver, reads the upstream's body itself,
	// at its own pace as if nobody shared it, and every byte it gets is
	// kept in the spool, so a client arriving in the middle of the body
	// can still join.
	modeTee int32 = iota + 1
	// modePump: two clients or more: the fetch reads the body into the
	// spool at the upstream's pace, and each client reads the spool at
	// its own.
	modePump
)

// lockUp takes the right to read the upstream's body; unlockUp gives it
// back.
func (f *flight[T]) lockUp()   { f.up <- struct{}{} }
func (f *flight[T]) unlockUp() { <-f.up }

// errHandedOver tells the driver that the upstream's body went over to
// the pump: from then on it reads the spool like every other client.
var errHandedOver = errors.New("the body was handed over to the pump")

// drive is the driver's read in modeTee: straight from the upstream's
// body, every byte also kept in the spool. Once the spool has stopped, the
// driver reads on alone, whatever joined meanwhile.
func (f *flight[T]) drive(p []byte) (int, error) {
	f.lockUp()
	defer f.unlockUp()
	switch {
	case f.teeStopped && f.upDone:
		return 0, io.EOF
	case f.upDone, f.pumping, !f.teeStopped && f.mode.Load() != modeTee:
		return 0, errHandedOver
	}
	if !f.teeStopped && f.sp.onDisk() {
		// The join window: a body kept only in memory so far. A read
		// that would go past it asks first whether anybody else wants
		// the body; nobody does, and the driver reads on without the
		// spool (no byte of it goes to disk) while later identical
		// requests fetch for themselves.
		if kept := f.sp.n.Load(); kept < headBytes {
			p = p[:min(int64(len(p)), headBytes-kept)]
		} else {
			switch f.closeIfAlone() {
			case aloneClosed:
				f.teeStopped = true
				f.sp.finish(errPastJoinWindow, nil)
				f.g.room.release(f.sp)
			case aloneHandedOver:
				return 0, errHandedOver
			}
		}
	}
	n, err := f.orig.Body.Read(p)
	if n > 0 && !f.teeStopped {
		if werr := f.sp.write(p[:n]); werr != nil {
			f.stopTee(werr)
		}
	}
	if err != nil {
		f.endUp(err)
	}
	return n, err
}

// errPastJoinWindow ends the spool of a body whose one client read past
// the join window with nobody else waiting: nobody will ever read it.
var errPastJoinWindow = errors.New("past the join window with one client")

// What closeIfAlone found.
const (
	aloneClosed     = iota // the driver is alone: nobody may join any more
	aloneWaited            // others wait to take the answer: the tee goes on
	aloneHandedOver        // a second client took it: the pump reads now
)

// closeIfAlone closes the fetch to new clients when its driver is the only
// one waiting for it or reading it. A client that has joined but not yet
// taken its answer counts: it will hand the body over as soon as it does.
func (f *flight[T]) closeIfAlone() int {
	g := f.g
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case f.mode.Load() != modeTee:
		return aloneHandedOver
	case f.waiters > 1:
		return aloneWaited
	}
	f.closeLocked()
	return aloneClosed
}

// closeLocked closes the fetch to new clients. g.mu must be held.
func (f *flight[T]) closeLocked() {
	f.closed = true
	f.forgetLocked()
}

// forgetLocked takes the fetch out of the group, if it is still the one
// under its key: a request arriving from now on starts a fetch of its own.
// g.mu must be held.
func (f *flight[T]) forgetLocked() {
	if g := f.g; g.flights[f.key] == f {
		delete(g.flights, f.key)
	}
}

// stopTee ends the spool of a body only its driver reads, which goes on
// reading alone; nobody may join any more. A client that joined just as
// it stopped finds its body broken off where the spool ended. The right
// to read the upstream must be held.
func (f *flight[T]) stopTee(err error) {
	g := f.g
	f.teeStopped = true
	f.sp.finish(err, nil)
	g.mu.Lock()
	f.closeLocked()
	g.mu.Unlock()
	if !errors.Is(err, errNoRoom) {
		g.warnSpool(err)
	}
}

// pump reads the upstream's body into the spool once a second client has
// joined, after the driver's read in progress, if any. It takes the right
// to read the upstream once, to mark it its own, and reads without holding
// it: a driver that comes back must learn at once that the body went
// over, not wait for the whole body.
func (f *flight[T]) pump() {
	f.lockUp()
	if f.upDone || f.teeStopped {
		// The driver read it all, or reads on alone.
		f.unlockUp()
		return
	}
	f.pumping = true
	f.unlockUp()
	err := f.g.readFrom(f.orig.Body, f.sp)
	f.lockUp()
	defer f.unlockUp()
	f.endUp(err)
}

// drop ends the upstream's body when every client has gone before it
// ended; the fetch was cancelled first, so a read in progress ends soon.
// A body the pump reads ends with the pump.
func (f *flight[T]) drop() {
	f.lockUp()
	defer f.unlockUp()
	if !f.upDone && !f.pumping {
		f.endUp(errAllGone)
	}
}

// endUp records the end of the upstream's body (err nil or io.EOF: a clean
// one) and closes it; the spool is released once no client reads it
// either. The right to read the upstream must be held.
func (f *flight[T]) endUp(err error) {
	f.upDone = true
	f.orig.Body.Close()
	// The transport fills the trailer in once the body has ended.
	f.sp.finish(err, f.orig.Trailer.Clone())
	g := f.g
	g.mu.Lock()
	f.pumped = true
	// The fetch is over: a request from now on is not "while it is in
	// flight", and starts its own.
	f.forgetLocked()
	unread := f.waiters == 0
	g.mu.Unlock()
	if unread {
		f.release()
	}
}
