package coalesce

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
)

// The two bodies a client of a fetch reads: its own reader of the spool,
// or the answer itself when it went to this one client alone. A reader of
// the spool counts as waiting until it closes the body or its client goes
// away, whichever comes first; the one client of an answer that was not
// spooled ends the fetch when it goes away, and leaves when it closes the
// body. Either way the fetch lives exactly as long as somebody still wants
// its bytes.

// spoolBody is one client's reader of a spooled answer.
type spoolBody[T any] struct {
	f    *flight[T]
	resp *http.Response // the client's answer, whose Trailer the end fills in
	done <-chan struct{}
	// driver: this client reads the upstream's body itself (modeTee)
	// until it is handed over to the pump.
	driver bool
	off    int64
	stop   func() bool
	left   atomic.Bool
}

func newSpoolBody[T any](f *flight[T], ctx context.Context, resp *http.Response, driver bool) *spoolBody[T] {
	b := &spoolBody[T]{f: f, resp: resp, done: ctx.Done(), driver: driver}
	b.stop = context.AfterFunc(ctx, b.leave)
	return b
}

// Read gives the next bytes: the driver's straight from the upstream,
// anybody else's (and the driver's once the pump has the body) those that
// have arrived in the spool, waiting for the fetch only when this client
// has read everything that has.
func (b *spoolBody[T]) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	select {
	case <-b.done:
		// Gone: nothing more is read for it, whatever has arrived.
		return 0, errClientGone
	default:
	}
	var (
		n   int
		err error
	)
	if b.driver {
		if n, err = b.f.drive(p); err == errHandedOver {
			b.driver = false
		}
	}
	if !b.driver {
		n, err = b.f.sp.readAt(p, b.off, b.done)
	}
	b.off += int64(n)
	if err == io.EOF {
		b.resp.Trailer = b.f.sp.trailerCopy()
	}
	return n, err
}

// Close stops reading; the spool stays for the other clients.
func (b *spoolBody[T]) Close() error {
	b.stop()
	b.leave()
	return nil
}

func (b *spoolBody[T]) leave() {
	if b.left.CompareAndSwap(false, true) {
		b.f.leave()
	}
}

// directBody is an answer that went to one client as it came: its
// client's going away must end the fetch, which only the client's own
// context would have done had the fetch not been made under the flight's.
type directBody[T any] struct {
	io.ReadCloser
	f    *flight[T]
	stop func() bool
	left atomic.Bool
}

func newDirectBody[T any](f *flight[T], ctx context.Context, rc io.ReadCloser) *directBody[T] {
	b := &directBody[T]{ReadCloser: rc, f: f}
	b.stop = context.AfterFunc(ctx, func() { f.cancel(errClientGone) })
	return b
}

func (b *directBody[T]) Close() error {
	b.stop()
	err := b.ReadCloser.Close()
	if b.left.CompareAndSwap(false, true) {
		b.f.leave()
	}
	return err
}
