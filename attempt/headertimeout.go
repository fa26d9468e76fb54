package attempt

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// ErrUnaskedSwitch is the error of an upstream that answered 101 Switching
// Protocols to a request that did not ask to switch, or switched to a
// protocol it was not offered: a broken answer, never relayed, since
// relaying it would hand the client's connection (and every request the
// client sends on it next, to any host) to that upstream.
var ErrUnaskedSwitch = errors.New("upstream switched protocols without being asked")

// RoundTripWithin sends req through rt and gives the upstream d to answer
// with response headers (d <= 0: no limit of our own); http.Transport has
// one ResponseHeaderTimeout for all hosts, while each format has its own
// proxy_timeout. The wait counts only the time spent on the upstream: it is
// paused whenever the transport waits for the next piece of the client's
// request body, so a slow upload is the client's time, never the
// upstream's (docs/behaviour.md §5.1), while an upstream that stops taking
// the body, or answers nothing once it has it, runs the clock down.
//
// On success the attempt context stays alive for the body and release must
// be called once the body is done with; the answer carries no header in the
// proxy's own x-nora- namespace. Its trailers may: their values arrive only
// at the body's end, so the writer of the answer leaves them out then
// (relay.Answer). On failure the error is ErrHeaderTimeout
// when the wait ran out (unless the transport blamed the parent proxy:
// ErrParent), ErrUnaskedSwitch for a 101 nobody asked for, the cause the
// request's context was cancelled with when it wraps ErrCancelled (the
// proxy gave the attempt up), else the transport's error, and nothing
// needs releasing.
func RoundTripWithin(rt http.RoundTripper, req *http.Request, d time.Duration) (
	resp *http.Response, attempt context.Context, release context.CancelCauseFunc, err error) {
	return roundTrip(rt, req, d, Bound{}, alarm{})
}

// alarm is a second deadline on the header wait's clock: fire is called,
// once, when after of upstream time has passed with no headers. Zero: none.
type alarm struct {
	after time.Duration
	fire  func()
}

// roundTrip is RoundTripWithin with the proxy's own bound on the wait
// (Target.Bound) and an alarm.
func roundTrip(rt http.RoundTripper, req *http.Request, d time.Duration, bound Bound, al alarm) (
	resp *http.Response, attempt context.Context, release context.CancelCauseFunc, err error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	ht := newHeaderTimer(d, func() { cancel(ErrHeaderTimeout) })
	var at, bt *headerTimer // nil: no alarm, no bound
	if al.after > 0 {
		at = newHeaderTimer(al.after, al.fire)
	}
	if bound.After > 0 {
		// Not paused for the client's body: it bounds the proxy's own
		// wait, not the upstream's time.
		bt = newHeaderTimer(bound.After, func() { cancel(bound.Cause) })
	}
	out := req.WithContext(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		out.Body = &clientPaced{rc: req.Body, timers: [2]*headerTimer{ht, at}}
	}
	resp, err = rt.RoundTrip(out)
	at.stop()
	timedOut, cut := ht.stop(), bt.stop()
	if (timedOut || cut) && err == nil {
		// A timer fired just as the headers arrived; the context is
		// already cancelled, so the body is unreadable: treat it as the
		// timeout or the giving up it nearly was.
		resp.Body.Close()
		resp, err = nil, context.Cause(ctx)
	}
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols && !SwitchAsked(req, resp) {
		resp.Body.Close()
		resp, err = nil, ErrUnaskedSwitch
	}
	if err != nil {
		// The wait ran out; but a parent proxy that was still being
		// dialled when it did is the parent's fault, not the upstream's,
		// and dial says so with an error wrapping ErrParent.
		switch cause := context.Cause(ctx); {
		case cause == ErrHeaderTimeout && !errors.Is(err, ErrParent):
			err = ErrHeaderTimeout
		case errors.Is(cause, ErrCancelled):
			err = cause
		}
		cancel(nil)
		return nil, nil, nil, err
	}
	StripOwnHeaders(resp.Header)
	// Only the names of declared trailers are known yet; the values fill
	// the map at the body's end and are filtered as they are written.
	StripOwnHeaders(resp.Trailer)
	return resp, ctx, cancel, nil
}

// SwitchAsked reports whether resp, a 101, answers req's own request to
// switch: req says Connection: upgrade and offers protocols in Upgrade, and
// resp switches to protocols among them (RFC 9110 §7.8).
func SwitchAsked(req *http.Request, resp *http.Response) bool {
	if !httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade") {
		return false
	}
	offered := tokens(req.Header["Upgrade"])
	chosen := tokens(resp.Header["Upgrade"])
	if len(offered) == 0 || len(chosen) == 0 {
		return false
	}
	for _, c := range chosen {
		found := false
		for _, o := range offered {
			if strings.EqualFold(c, o) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// tokens splits header values into their comma-separated, trimmed tokens.
func tokens(values []string) []string {
	var out []string
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// ownPrefix is the proxy's own header namespace: X-Nora-Stale,
// X-Nora-Upstream, X-Nora-Breaker-Key and -State are set by the proxy
// alone, so a client can believe them.
const ownPrefix = "X-Nora-"

// StripOwnHeaders removes every header of the proxy's own namespace from h,
// an upstream's answer: an upstream that sends X-Nora-Stale: true would
// otherwise make a client believe a fresh answer is a stale copy.
func StripOwnHeaders(h http.Header) {
	for k := range h {
		if OwnHeader(k) {
			delete(h, k)
		}
	}
}

// OwnHeader reports whether name, in any case, is in the proxy's own
// namespace.
func OwnHeader(name string) bool {
	return len(name) >= len(ownPrefix) && strings.EqualFold(name[:len(ownPrefix)], ownPrefix)
}

// headerTimer is the wait for response headers. It runs from the start of
// the round trip, is paused while the transport waits on the client's body
// (pause, resume: the transport's one writing goroutine) and is stopped when
// the answer or an error arrives (stop, on the round trip's goroutine).
type headerTimer struct {
	fire func()
	d    time.Duration

	mu      sync.Mutex
	t       *time.Timer // nil: no limit
	left    time.Duration
	since   time.Time // when the running stretch began
	running bool
	done    bool
	graced  bool // expire has granted its one grace (late)
	fired   atomic.Bool
}

// late is how far past its deadline a timer may run before the wait is
// taken to have run out while the proxy itself was not running. Timers
// of a busy process run a few milliseconds late; one that runs this late
// was held up by the process being stopped (SIGSTOP, a frozen cgroup), a
// long GC pause or a starved CPU.
const late = 100 * time.Millisecond

func newHeaderTimer(d time.Duration, fire func()) *headerTimer {
	h := &headerTimer{fire: fire, d: d, left: d}
	if d > 0 {
		h.mu.Lock() // expire reads h.t
		h.since, h.running = time.Now(), true
		h.t = time.AfterFunc(d, h.expire)
		h.mu.Unlock()
	}
	return h
}

// expire is the wait running out, unless it ran out while the proxy was
// not running: the upstream was then waited on by nobody, and its answer,
// if it came meanwhile, lies in the socket's buffer while this timer and
// the goroutine that would read it become runnable at the same instant
// (every attempt in flight at once). Such a wait gets once as long again as
// the timer was overdue (at most the whole wait) for the proxy to read
// what arrived; the upstream is blamed only if nothing did (docs/behaviour.md
// §5.1: every timer blames only the party it waits on).
func (h *headerTimer) expire() {
	h.mu.Lock()
	if over := time.Since(h.since) - h.left; over > late && !h.graced && !h.done {
		h.graced = true
		h.since, h.left = time.Now(), min(over, h.d)
		h.t.Reset(h.left)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.fired.Store(true)
	h.fire()
}

// pause stops the clock while the client is waited on. Like resume and
// stop, it does nothing on a nil timer (no alarm).
func (h *headerTimer) pause() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.t == nil || h.done || !h.running || !h.t.Stop() {
		return // no limit, over, or already fired
	}
	h.left -= time.Since(h.since)
	h.running = false
}

// resume starts the clock again with what was left of the wait.
func (h *headerTimer) resume() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.t == nil || h.done || h.running {
		return
	}
	h.since, h.running = time.Now(), true
	h.t.Reset(max(h.left, 0))
}

// stop ends the wait and reports whether it had run out.
func (h *headerTimer) stop() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	h.done = true
	if h.t != nil {
		h.t.Stop()
	}
	h.mu.Unlock()
	return h.fired.Load()
}

// clientPaced is the request body the transport sends: each read of it
// waits on the client, and the header wait and its alarm are paused
// meanwhile.
type clientPaced struct {
	rc     io.ReadCloser
	timers [2]*headerTimer
}

func (b *clientPaced) Read(p []byte) (int, error) {
	for _, t := range b.timers {
		t.pause()
	}
	n, err := b.rc.Read(p)
	for _, t := range b.timers {
		t.resume()
	}
	return n, err
}

func (b *clientPaced) Close() error { return b.rc.Close() }
