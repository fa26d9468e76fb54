package attempt

import (
	"context"
	"sync"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// silence is one attempt's part in early opening (docs/behaviour.md §4):
// begin, called by the header wait's alarm once the attempt has waited its
// suspect wait, counts it silent for its breaker; end, once the round trip
// is over, stops its waiting on the breaker. Either may come first.
//
// An attempt the proxy gives up before its suspect wait without any answer
// (its hedge served first) cannot learn whether it would have been
// answered. It is counted silent at the time its suspect wait would have
// passed if its host has answered nobody since it was sent: otherwise the
// hedges of a black hole, which give up its attempts early, would keep its
// breaker from ever learning that it answers no one. A client that leaves
// early is not taken for such evidence: it may leave after a millisecond.
type silence struct {
	ticket  breakerstate.Ticket
	onOpen  func()
	key     string
	recent  *recent
	answers uint64 // the host's answers when the attempt was sent
	wait    time.Duration
	start   time.Time
	now     func() time.Time
	// clients is how many client requests wait on the attempt when it
	// is counted (WithClients; 1 for a request of its own).
	clients func() int

	mu      sync.Mutex
	counted bool   // begin has counted the attempt
	release func() // set by begin once Suspect returned
	over    bool
}

func (w *silence) begin() {
	w.mu.Lock()
	if w.over {
		w.mu.Unlock()
		return
	}
	w.counted = true
	w.mu.Unlock()
	release := w.ticket.Suspect(w.clients(), w.onOpen)
	w.mu.Lock()
	over := w.over
	if !over {
		w.release = release
	}
	w.mu.Unlock()
	if over {
		release()
	}
}

// end ends the attempt's wait; givenUp says the proxy gave it up
// (ErrCancelled), so that an attempt not yet counted is counted later if
// its host stays silent.
func (w *silence) end(givenUp bool) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.over = true
	release, counted := w.release, w.counted
	w.mu.Unlock()
	if release != nil {
		release()
	}
	if givenUp && !counted {
		left := w.wait - w.now().Sub(w.start)
		time.AfterFunc(max(left, 0), func() {
			if w.recent.answered(w.key) == w.answers {
				w.ticket.Suspect(w.clients(), nil)()
			}
		})
	}
}

// clientsKey is the context key of WithClients.
type clientsKey struct{}

// WithClients marks ctx as the context of attempts that several client
// requests wait on (a fetch identical requests share, docs/behaviour.md
// §5.9): n tells how many wait at the moment it is called. A silent
// attempt counts as that many silent requests for early opening (§4); its
// verdict is still one.
func WithClients(ctx context.Context, n func() int) context.Context {
	return context.WithValue(ctx, clientsKey{}, n)
}

// clientsOf returns the count WithClients put in ctx, or one request.
func clientsOf(ctx context.Context) func() int {
	if n, ok := ctx.Value(clientsKey{}).(func() int); ok {
		return n
	}
	return one
}

func one() int { return 1 }
