package attempt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// Target is the upstream side of one attempt: the breaker key it is measured
// and reported under, and its two time limits.
type Target struct {
	// Key is the breaker key of the host the attempt goes to.
	Key string
	// HeaderTimeout bounds the wait for response headers (the format's
	// proxy_timeout), counting only the time spent on the upstream
	// (RoundTripWithin). Zero or less means no limit of our own.
	HeaderTimeout time.Duration
	// ReadTimeout bounds the idle time while reading the body (docker
	// read_timeout; other formats use their proxy_timeout). Zero means none.
	ReadTimeout time.Duration
	// SuspectAfter is how long a GET or HEAD waits for headers before it
	// counts as silent for its breaker (Ticket.Suspect): suspect_after, or
	// twice the host's recent tail when that is longer (suspectWait).
	// Zero or less: never silent.
	SuspectAfter time.Duration
	// OnOpen, when set, is called if Key's breaker opens while the attempt
	// is silent (at once if it is already open), so that the caller can
	// give the attempt up and go on; see Ticket.Suspect.
	OnOpen func()
	// Bound, when set, is a limit of the proxy's own on the header wait,
	// shorter than HeaderTimeout (the fallback search's, docs/behaviour.md
	// §5.4).
	Bound Bound
}

// Bound is a limit the proxy puts on an attempt's wait for headers for a
// reason of its own. Running out of it says nothing about the upstream,
// which was not given its proxy_timeout: the attempt is given up with
// Cause, which wraps ErrCancelled, and is neutral (docs/behaviour.md §5.1:
// every timer blames only the party it waits on).
type Bound struct {
	// After is how long the wait may last; zero or less: no bound.
	After time.Duration
	// Cause says why; it must wrap ErrCancelled.
	Cause error
}

// Sender makes attempts and measures them. One Sender serves the whole
// process; the transport is handed in per attempt because it belongs to the
// configuration the request arrived under.
type Sender struct {
	now         func() time.Time
	duration    *prometheus.HistogramVec
	localFaults prometheus.Counter
	recent      recent
}

// NewSender registers the attempt duration histogram and the local fault
// counter on reg.
func NewSender(now func() time.Time, reg prometheus.Registerer) (*Sender, error) {
	d := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "nora_upstream_request_duration_seconds",
		Help:    "Time until an upstream answered with headers (or failed), by breaker key and status class.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"registry", "status"})
	lf := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nora_sidecar_local_faults_total",
		Help: "Attempts and dials that failed on this machine itself (out of file descriptors, buffers, memory or local ports, or no name server reachable): neutral for every breaker.",
	})
	for _, c := range []prometheus.Collector{d, lf} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register attempt metrics: %w", err)
		}
	}
	return &Sender{now: now, duration: d, localFaults: lf, recent: recent{born: now()}}, nil
}

// HeaderTail is about the 99th percentile of the times key's host took to
// answer GET and HEAD requests with headers over the last one to two
// minutes (at most √2 above it: the counts are kept in half-octave
// buckets); false while it has answered fewer than 5 of them.
func (s *Sender) HeaderTail(key string) (time.Duration, bool) {
	return s.recent.tailOf(key, s.now())
}

// Answered is how many GET and HEAD answers key's host has given through
// this Sender: a request that sees it unchanged since it was sent knows the
// host has answered no one meanwhile.
func (s *Sender) Answered(key string) uint64 { return s.recent.answered(key) }

// Forget drops what the Sender keeps for keys that left the breaker set (a
// learned host forgotten, an upstream removed by a reload): their duration
// series and their header times. An attempt still in flight for one may
// bring a series back; the next Forget of it, or none, is harmless.
func (s *Sender) Forget(keys ...string) {
	for _, k := range keys {
		s.duration.DeletePartialMatch(prometheus.Labels{"registry": k})
		s.recent.keys.Delete(k)
	}
}

// suspectWait is how long out waits for headers before it counts as
// silent: the target's SuspectAfter, or twice the host's recent tail when
// that is longer, since a host that is slow by habit is not silent when it
// takes its usual time; 0 (never) for a request other than GET and HEAD,
// whose time at the upstream may be work on what it was sent, and for a
// wait the header timeout or the proxy's bound ends first.
func (s *Sender) suspectWait(out *http.Request, target Target) time.Duration {
	if target.SuspectAfter <= 0 || (out.Method != http.MethodGet && out.Method != http.MethodHead) {
		return 0
	}
	wait := target.SuspectAfter
	if tail, ok := s.HeaderTail(target.Key); ok {
		wait = max(wait, 2*tail)
	}
	if target.HeaderTimeout > 0 && wait >= target.HeaderTimeout {
		return 0
	}
	if target.Bound.After > 0 && wait >= target.Bound.After {
		return 0
	}
	return wait
}

// CountLocalFault counts err when it is this machine's own fault
// (LocalFault), for the attempts and dials made outside Send.
func (s *Sender) CountLocalFault(err error) {
	if LocalFault(err) {
		s.localFaults.Inc()
	}
}

// Send performs one attempt of out through rt at target, admitted by ticket.
// The request's context is the client's: if it ends first the attempt is
// neutral. On a transport error the returned error wraps ErrHeaderTimeout
// when the header wait ran out, the target's Bound.Cause when its bound did,
// and ErrClientRequest when the client's own request body could not be read. The caller must close the returned body.
func (s *Sender) Send(rt http.RoundTripper, out *http.Request, target Target, ticket breakerstate.Ticket) (*http.Response, error) {
	clientCtx := out.Context()
	var body *requestBody
	if out.Body != nil && out.Body != http.NoBody {
		body = &requestBody{rc: out.Body}
		out.Body = body
	}
	start := s.now()
	var al alarm
	var sw *silence // nil: the attempt is never silent
	if wait := s.suspectWait(out, target); wait > 0 {
		sw = &silence{ticket: ticket, onOpen: target.OnOpen, key: target.Key, recent: &s.recent,
			answers: s.recent.answered(target.Key), wait: wait, start: start, now: s.now,
			clients: clientsOf(clientCtx)}
		al = alarm{after: wait, fire: sw.begin}
	}
	resp, ctx, cancel, err := roundTrip(rt, out, target.HeaderTimeout, target.Bound, al)
	sw.end(errors.Is(err, ErrCancelled))
	if err == nil {
		ticket.Heard()
		if body == nil && (out.Method == http.MethodGet || out.Method == http.MethodHead) {
			now := s.now()
			s.recent.observe(target.Key, now, now.Sub(start))
		}
	}
	if err != nil {
		if bodyErr := body.failed(); bodyErr != nil {
			// The client sent a request that cannot be read (a broken
			// chunked body, a body shorter than it said, a reset stream):
			// that is the client's problem, not the upstream's.
			err = fmt.Errorf("%w: %v", ErrClientRequest, bodyErr)
		}
		s.observe(target.Key, nil, err, start)
		ticket.Done(Decide(nil, err, clientCtx))
		return nil, fmt.Errorf("upstream %s: %w", target.Key, err)
	}
	s.observe(target.Key, resp, nil, start)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// A websocket upgrade: the body is the raw connection, which the
		// proxy relays itself; wrapping it would hide its io.Writer. The
		// attempt context lives as long as the client's request.
		ticket.Done(breakerstate.Success)
		return resp, nil
	}
	outcome := Decide(resp, nil, clientCtx)
	if bodyless(out, resp) {
		// Complete at its headers: a Content-Length on it describes the
		// GET, not bytes to come, so nothing is read or checked.
		ticket.Done(outcome)
		resp.Body.Close()
		cancel(nil)
		resp.Body = http.NoBody
		return resp, nil
	}
	if !BodyDecides(out, resp) {
		ticket.Done(outcome)
		ticket = breakerstate.Ticket{}
	}
	resp.Body = newWatchedBody(resp, body, ticket, ctx, cancel, target.ReadTimeout)
	return resp, nil
}

// BodyDecides reports whether the verdict on the answer resp to req waits
// for its body to end: a success with bytes to come, which a body that
// ends short or stalls still turns into a failure. Send reports every
// other verdict when the headers arrive.
func BodyDecides(req *http.Request, resp *http.Response) bool {
	return resp.StatusCode != http.StatusSwitchingProtocols && !bodyless(req, resp) && resp.ContentLength != 0 &&
		Decide(resp, nil, nil) == breakerstate.Success
}

func (s *Sender) observe(key string, resp *http.Response, err error, start time.Time) {
	s.duration.WithLabelValues(key, statusClass(resp, err)).Observe(s.now().Sub(start).Seconds())
	s.CountLocalFault(err)
}

// bodyless reports an answer that has no body whatever its headers say:
// the answer to a HEAD, 1xx, 204 and 304.
func bodyless(req *http.Request, resp *http.Response) bool {
	return req.Method == http.MethodHead || resp.StatusCode < 200 ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
}

// requestBody remembers why reading the client's request body failed, so a
// failed round trip, or an answer's body that breaks off, can be told
// apart: the client's fault or the upstream's. The transport reads it on a
// goroutine of its own, while the answer may already be read on another.
type requestBody struct {
	rc      io.ReadCloser
	waiting atomic.Bool // a Read waits on the client
	mu      sync.Mutex
	err     error // the first read error other than io.EOF
}

func (b *requestBody) Read(p []byte) (int, error) {
	b.waiting.Store(true)
	n, err := b.rc.Read(p)
	b.waiting.Store(false)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// waitsOnClient reports whether the transport is waiting for the next piece
// of the client's body (false for no body, b nil).
func (b *requestBody) waitsOnClient() bool { return b != nil && b.waiting.Load() }

// failed is why reading the client's body failed, or nil: it has not, or
// there is none (b is nil).
func (b *requestBody) failed() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *requestBody) Close() error { return b.rc.Close() }

// watchedBody enforces the idle read timeout, checks the length, and reports
// the deferred outcome of a successful answer when the body ends. The idle
// clock runs only while a Read waits for the upstream: between Reads the
// reader is busy with the client (writing to it, perhaps blocked by a client
// that reads slowly), and that time is not the upstream's. Nor is a wait
// during which the upload is still being read from the client: an upstream
// that answered early may wait for the rest of it before it sends more
// (docs/behaviour.md §5.1, every timer blames only the party it waits on).
type watchedBody struct {
	rc      io.ReadCloser
	ticket  breakerstate.Ticket // zero when the outcome was already reported
	attempt context.Context     // cancelled with errBodyStalled by the idle timer
	cancel  context.CancelCauseFunc
	mu      sync.Mutex  // orders idle's Reset and Stop with its expiry
	idle    *time.Timer // stopped between Reads
	reading bool        // a Read is in progress (under mu)
	due     time.Time   // when idle runs out (under mu)
	graced  bool        // expire granted this Read's one grace (late)
	timeout time.Duration
	want    int64 // Content-Length, or -1
	n       int64
	done    atomic.Bool
	// request is the client's request body (nil: none). An upload can go
	// on while the answer streams (an upstream that answers early); when
	// reading it fails, the transport cuts the upstream's connection,
	// HTTP/1.1's and HTTP/2's alike, and the answer breaks off for that.
	request *requestBody
}

func newWatchedBody(resp *http.Response, request *requestBody, t breakerstate.Ticket, attempt context.Context,
	cancel context.CancelCauseFunc, timeout time.Duration) *watchedBody {
	b := &watchedBody{rc: resp.Body, ticket: t, attempt: attempt, cancel: cancel, timeout: timeout,
		want: resp.ContentLength, request: request}
	if timeout > 0 {
		b.idle = time.AfterFunc(timeout, b.expire)
		b.idle.Stop()
	}
	return b
}

// expire is the idle timer running out: the answer stalled, unless the
// transport was waiting on the client's upload meanwhile, which starts the
// wait again, or the Read it was armed for has ended.
//
// Nor is the time the proxy itself was not running: a timer more than late
// past its time ran out while the process was stopped or starved, and the
// upstream's bytes may be waiting in the socket (headerTimer.expire). It
// gets once per Read as long again as it was late, at most the timeout.
func (b *watchedBody) expire() {
	b.mu.Lock()
	if !b.reading {
		b.mu.Unlock()
		return
	}
	if b.request.waitsOnClient() {
		b.arm(b.timeout)
		b.mu.Unlock()
		return
	}
	if over := time.Since(b.due); over > late && !b.graced {
		b.graced = true
		b.arm(min(over, b.timeout))
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.cancel(errBodyStalled)
}

// arm starts the idle timer for d. b.mu must be held.
func (b *watchedBody) arm(d time.Duration) {
	b.due = time.Now().Add(d)
	b.idle.Reset(d)
}

// clock starts (a Read begins) or stops the idle timer.
func (b *watchedBody) clock(run bool) {
	if b.idle == nil {
		return
	}
	b.mu.Lock()
	b.reading = run
	if run {
		b.graced = false
		b.arm(b.timeout)
	} else {
		b.idle.Stop()
	}
	b.mu.Unlock()
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.clock(true)
	n, err := b.rc.Read(p)
	b.clock(false)
	b.n += int64(n)
	switch {
	case err == io.EOF:
		if b.want >= 0 && b.n != b.want {
			b.finish(breakerstate.Failure)
			return n, fmt.Errorf("%w (%d of %d bytes)", errShortBody, b.n, b.want)
		}
		b.finish(breakerstate.Success)
	case err != nil:
		cause := context.Cause(b.attempt)
		if cause == errBodyStalled {
			b.finish(breakerstate.Failure)
			return n, errBodyStalled
		}
		if cause != nil {
			// The client's context ended: its going away says nothing
			// about the upstream.
			b.finish(breakerstate.Neutral)
			return n, err
		}
		if b.request.failed() != nil {
			// The client's own request could not be read (it stalled
			// past idle_timeout, the client's timer, or broke), and the
			// transport cut the upstream's connection for it; the
			// client's context may end only later (docs/behaviour.md
			// §5.1).
			b.finish(breakerstate.Neutral)
			return n, err
		}
		b.finish(breakerstate.Failure)
	}
	return n, err
}

// Close ends the attempt. Closing before the end means the reader (the
// client, or the fallback loop discarding an answer) lost interest, which
// says nothing about the upstream.
func (b *watchedBody) Close() error {
	b.finish(breakerstate.Neutral)
	return b.rc.Close()
}

func (b *watchedBody) finish(o breakerstate.Outcome) {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	if b.idle != nil {
		b.idle.Stop()
	}
	b.ticket.Done(o)
	b.cancel(nil)
}
