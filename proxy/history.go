package proxy

import (
	"net/http"
	"sort"
	"sync"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/adminapi"
)

// historySize is how many breaker transitions the admin listener remembers
// (GET /breakers/history and the status page's timeline).
const historySize = 200

// historyEntry is one breaker transition as GET /breakers/history shows it;
// its wire form, shared with the status command, is adminapi.Transition.
type historyEntry = adminapi.Transition

// transitionLog is a bounded ring of the most recent transitions, safe for
// concurrent use. Its zero value is empty and ready: the Proxy holds it by
// value, and the breaker set's transition hook feeds it.
type transitionLog struct {
	mu   sync.Mutex
	ring [historySize]historyEntry
	next int // where the next entry goes
	n    int // entries held, at most historySize
}

// add records one entry, dropping the oldest when the ring is full.
func (l *transitionLog) add(e historyEntry) {
	l.mu.Lock()
	l.ring[l.next] = e
	l.next = (l.next + 1) % historySize
	if l.n < historySize {
		l.n++
	}
	l.mu.Unlock()
}

// list returns the entries held, newest first. Transitions of one key can
// reach the hook out of order when they race (breakerstate.Options), so the
// copy is ordered by the time each transition happened, ties kept in
// arrival order.
func (l *transitionLog) list() []historyEntry {
	l.mu.Lock()
	out := make([]historyEntry, 0, l.n)
	for i := range l.n {
		out = append(out, l.ring[(l.next-1-i+historySize)%historySize])
	}
	l.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.After(out[j].At) })
	return out
}

// newHistoryEntry turns a breaker transition into what the history shows.
func newHistoryEntry(t breakerstate.Transition) historyEntry {
	return historyEntry{At: t.At, Key: t.Key, From: t.From.String(), To: t.To.String(), Why: transitionWhy(t),
		FailureCount: t.FailureCount}
}

// transitionWhy names the reason for a transition in an operator's words.
// Manual and fleet changes are told apart first: they can take any path
// through the state machine.
func transitionWhy(t breakerstate.Transition) string {
	switch {
	case t.Manual:
		return "forced"
	case t.Remote:
		return "fleet"
	}
	switch [2]breakerstate.State{t.From, t.To} {
	case [2]breakerstate.State{breakerstate.Closed, breakerstate.Open}:
		return "threshold reached"
	case [2]breakerstate.State{breakerstate.HalfOpen, breakerstate.Open}:
		return "probe failed"
	case [2]breakerstate.State{breakerstate.HalfOpen, breakerstate.Closed}:
		return "probe succeeded"
	case [2]breakerstate.State{breakerstate.Open, breakerstate.HalfOpen}:
		return "probe due"
	case [2]breakerstate.State{breakerstate.Open, breakerstate.Closed}:
		// A request admitted while still closed came back with a success
		// after the breaker had opened; NORA's semantics close it.
		return "success of a request admitted before the opening"
	}
	return t.From.String() + " → " + t.To.String()
}

// handleHistory serves GET /breakers/history: the last transitions, newest
// first.
func (p *Proxy) handleHistory(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, p.history.list())
}
