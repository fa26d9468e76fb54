package stale

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// A stored copy younger than RefreshAfter is not rewritten by the next
// answer to the same request; once it is older, the next answer replaces it.
func TestRefreshAfterKeepsYoungCopies(t *testing.T) {
	clk := testkit.NewClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	c, _ := newTestCache(t, Options{Now: clk.Now, RefreshAfter: time.Minute})
	store(t, c, "k", "version one")
	store(t, c, "k", "version two")
	if got, _ := lookupBody(t, c, "k"); got != "version one" {
		t.Fatalf("a copy younger than RefreshAfter was replaced: %q", got)
	}
	clk.Advance(61 * time.Second)
	store(t, c, "k", "version three")
	if got, _ := lookupBody(t, c, "k"); got != "version three" {
		t.Fatalf("an old copy was not refreshed: %q", got)
	}
}

// While one response of a key is being written, other responses of the same
// key stream to their clients untouched and are not written a second time.
func TestOneWriteInFlightPerKey(t *testing.T) {
	c, _ := newTestCache(t, Options{})
	first := okResponse(strings.NewReader("first body"), 10)
	tee(c, "k", first)
	second := okResponse(strings.NewReader("second body"), 11)
	orig := second.Body
	tee(c, "k", second)
	if second.Body != orig {
		t.Fatal("a second write of a key in flight was started")
	}
	if b, _ := io.ReadAll(second.Body); string(b) != "second body" {
		t.Fatalf("client got %q", b)
	}
	if b, _ := io.ReadAll(first.Body); string(b) != "first body" {
		t.Fatalf("client got %q", b)
	}
	first.Body.Close()
	c.commits.Wait()
	if got, _ := lookupBody(t, c, "k"); got != "first body" {
		t.Fatalf("stored %q", got)
	}
	// The claim is released: the next answer is written again.
	store(t, c, "k", "third body")
	if got, _ := lookupBody(t, c, "k"); got != "third body" {
		t.Fatalf("after the first write finished, stored %q", got)
	}
}

// MaxWriters bounds the writes in flight; beyond it answers go unstored
// instead of queueing behind the disk.
func TestMaxWritersBound(t *testing.T) {
	c, _ := newTestCache(t, Options{MaxWriters: 2})
	var open []io.ReadCloser
	for i, key := range []string{"a", "b", "c"} {
		resp := okResponse(strings.NewReader("body"), 4)
		orig := resp.Body
		tee(c, key, resp)
		if tee := resp.Body != orig; tee != (i < 2) {
			t.Fatalf("write %d (%s): tee=%v, want %v", i, key, tee, i < 2)
		}
		open = append(open, resp.Body)
	}
	for _, b := range open {
		b.Close() // abandoned: nothing read
	}
	c.commits.Wait()
	resp := okResponse(strings.NewReader("body"), 4)
	orig := resp.Body
	tee(c, "c", resp)
	if resp.Body == orig {
		t.Fatal("abandoned writes did not release their slots")
	}
	resp.Body.Close()
}
