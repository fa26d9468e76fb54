package coalesce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// The defaults of Options.MaxBytes and TotalBytes: those of
// stale_max_object_bytes and stale_max_bytes.
const (
	defaultMaxBytes   int64 = 64 << 20
	defaultTotalBytes int64 = 1 << 30
)

var (
	// errClientGone ends the read of a client that went away while its
	// answer streamed, and Do for one that went away before it came.
	errClientGone = errors.New("client went away")
	// errAllGone is the cause a fetch is cancelled with when the last
	// client waiting for it has gone: nobody is left to read its answer.
	errAllGone = errors.New("every client waiting for this fetch has gone")
)

// Options configures a Group. Zero values: Dir is os.TempDir(), MaxBytes
// 64 MiB, TotalBytes 1 GiB, Now time.Now, no metric registration, no logs.
type Options struct {
	// Dir holds the spool files, each unlinked as soon as it is made.
	Dir string
	// MaxBytes is the largest body always shared (stale_max_object_bytes);
	// a larger one is shared only while Dir's file system has room for it
	// (room.go), and only when a second client is already waiting for it
	// by the time its headers arrive.
	MaxBytes int64
	// TotalBytes bounds what the spools take on disk together
	// (stale_max_bytes; zero: 1 GiB). A body they cannot hold is not
	// shared.
	TotalBytes int64
	Now        func() time.Time
	Registerer prometheus.Registerer
	Logger     zerolog.Logger

	// free replaces freeBytes in tests.
	free func(dir string) (int64, error)
}

// Group runs each fetch once for all the identical requests that arrive
// while it is in flight. It is safe for concurrent use. T is what the
// caller's decision yields besides the answer (the fallback loop's record
// of its attempts); every client of a fetch shares one, read only.
type Group[T any] struct {
	dir   string
	bound int64
	room  *room
	log   zerolog.Logger
	now   func() time.Time
	m     *metrics
	// bufs recycles the fetches' copy buffers.
	bufs sync.Pool
	// warned is when a spool that could not be made was last logged (Unix
	// nanoseconds): a missing temp directory is said once a minute.
	warned atomic.Int64

	mu      sync.Mutex // guards flights and every flight's fields marked so
	flights map[flightKey]*flight[T]
}

// flightKey names a fetch: the request's Key within its Scope.
type flightKey struct {
	scope any
	key   string
}

// New builds a Group and registers its metrics.
func New[T any](o Options) (*Group[T], error) {
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = defaultMaxBytes
	}
	if o.TotalBytes <= 0 {
		o.TotalBytes = defaultTotalBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.free == nil {
		o.free = freeBytes
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	g := &Group[T]{dir: o.Dir, bound: o.MaxBytes, room: newRoom(o.Dir, o.MaxBytes, o.TotalBytes, o.free), log: o.Logger,
		now: o.Now, m: m, flights: map[flightKey]*flight[T]{}}
	g.bufs.New = func() any { b := make([]byte, 64<<10); return &b }
	if o.Registerer != nil {
		waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nora_sidecar_coalesce_waiting",
			Help: "Clients waiting for, or reading, the answer of a fetch they share with identical requests.",
		}, func() float64 { return float64(g.waitingAll()) })
		if err := o.Registerer.Register(waiting); err != nil {
			return nil, fmt.Errorf("register coalesce metrics: %w", err)
		}
	}
	return g, nil
}

// Call is one client's request as Do sees it.
type Call struct {
	// Key is the request's Key, and Scope what the request is decided
	// under (the proxy's configuration): requests with equal keys in the
	// same scope share a fetch. Scope must be comparable; nil is a scope
	// like any other.
	Key   string
	Scope any
	// Label names the request's format in the coalesced metric.
	Label string
	// Ctx is the client's: done once the client has gone.
	Ctx context.Context
	// Header is the client's request headers, which an answer's Vary is
	// checked against.
	Header http.Header
	// Fresh: the request may only join a fetch whose answer has not come
	// yet (Fresh of its request).
	Fresh bool
}

// Outcome is one client's part of a fetch.
type Outcome[T any] struct {
	// Resp is the client's own answer: its header map and body are its
	// alone, whoever else shares the fetch.
	Resp *http.Response
	// Value is what the fetch's decision yielded, shared by every client
	// of the fetch: read it, never change it.
	Value T
	// Joined marks a client that joined a fetch another request started.
	Joined bool
}

// Do gives the client c the answer of the fetch in flight for c.Key in
// c.Scope, starting one if there is none. fn is the whole decision of the
// request (every attempt and what follows them); it runs once per fetch,
// in the goroutine of the client that started it, under a context that
// carries that client's values but is cancelled only when every client
// waiting for the fetch has gone: when the first client goes away, its
// goroutine goes on deciding for the others. fn may read its client's
// request, which must not change until Do returns.
//
// Every client gets the answer's status and headers and a body of its own
// (body.go): a client alone reads the upstream's body itself, at its own
// pace, while each byte is kept in a spool; from the second client on the
// body is read at the upstream's pace and each client reads the spool at
// its own (upstream.go), so a slow client never slows the fetch or the
// others. The answer's Set-Cookie goes only to the client that started
// the fetch, whose request the upstream answered (dropSessions). A client the answer cannot be shared with (it varies by a header
// the client sent otherwise, or there is no room to keep it) gets a fetch
// of its own: Do then runs fn itself, under the client's own context. The
// error is non-nil only when the client went away before any answer came.
func (g *Group[T]) Do(c Call, fn func(context.Context) (*http.Response, T)) (Outcome[T], error) {
	fk := flightKey{scope: c.Scope, key: c.Key}
	g.mu.Lock()
	f, joined := g.flights[fk]
	if joined && c.Fresh && f.settled {
		// The answer in flight was made before this request was sent.
		g.mu.Unlock()
		resp, v := fn(c.Ctx)
		return Outcome[T]{Resp: resp, Value: v}, nil
	}
	if !joined {
		f = g.newFlight(fk, c)
		g.flights[fk] = f
	}
	f.waiters++
	g.mu.Unlock()
	if joined {
		select {
		case <-f.ready:
		case <-c.Ctx.Done():
			f.leave()
			return Outcome[T]{}, fmt.Errorf("%w: %w", errClientGone, context.Cause(c.Ctx))
		}
	} else {
		// The first client leaves when its client goes away, while its
		// goroutine goes on deciding for the others.
		stop := context.AfterFunc(c.Ctx, f.leave)
		f.run(fn)
		if !stop() {
			return Outcome[T]{}, fmt.Errorf("%w: %w", errClientGone, context.Cause(c.Ctx))
		}
	}
	if resp, ok := f.take(c, joined); ok {
		if joined {
			g.m.coalesced.WithLabelValues(c.Label).Inc()
		}
		return Outcome[T]{Resp: resp, Value: f.val, Joined: joined}, nil
	}
	f.leave()
	resp, v := fn(c.Ctx)
	return Outcome[T]{Resp: resp, Value: v}, nil
}

// Deciding reports whether a fetch is in flight for key in scope: an
// identical request arriving now would join it.
func (g *Group[T]) Deciding(scope any, key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.flights[flightKey{scope: scope, key: key}]
	return ok
}

// Busy reports whether any fetch is in flight: while none is, no request
// has a decision to join, whatever its key.
func (g *Group[T]) Busy() bool { return g.inFlight() > 0 }

// inFlight is the number of fetches in flight.
func (g *Group[T]) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.flights)
}

// waiting is the number of clients waiting for, or reading, the fetch in
// flight for key in the nil scope (0 when there is none).
func (g *Group[T]) waiting(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.flights[flightKey{key: key}]; f != nil {
		return f.waiters
	}
	return 0
}

// waitingAll is the number of clients waiting for, or reading, any fetch
// in flight.
func (g *Group[T]) waitingAll() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, f := range g.flights {
		n += f.waiters
	}
	return n
}

// warnSpool logs, at most once a minute, that a body could not be spooled.
func (g *Group[T]) warnSpool(err error) {
	now := g.now().UnixNano()
	last := g.warned.Load()
	if now-last < int64(time.Minute) || !g.warned.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn().Err(err).Str("dir", g.dir).
		Msg("coalesce: cannot make a spool file; identical requests fetch for themselves until it can")
}

// readFrom copies body into sp and reports how it ended (nil: cleanly).
func (g *Group[T]) readFrom(body io.Reader, sp *spool) error {
	bp := g.bufs.Get().(*[]byte)
	defer g.bufs.Put(bp)
	for {
		n, err := body.Read(*bp)
		if n > 0 {
			if werr := sp.write((*bp)[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
