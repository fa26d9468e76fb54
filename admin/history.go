package admin

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

// History is a bounded ring of the most recent transitions, safe for
// concurrent use. Its zero value is empty and ready; the breaker set's
// transition hook feeds it (Add).
type History struct {
	mu   sync.Mutex
	ring [historySize]historyEntry
	next int // where the next entry goes
	n    int // entries held, at most historySize
}

// Add records one transition, dropping the oldest when the ring is full.
func (l *History) Add(t breakerstate.Transition) { l.add(newHistoryEntry(t)) }

// add records one entry, dropping the oldest when the ring is full.
func (l *History) add(e historyEntry) {
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
func (l *History) list() []historyEntry {
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
	return historyEntry{At: t.At, Key: t.Key, From: t.From.String(), To: t.To.String(), Why: t.Why(),
		FailureCount: t.FailureCount}
}

// handleHistory serves GET /breakers/history: the last transitions, newest
// first.
func (s *Server) handleHistory(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.o.History.list())
}
