package route

import (
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestLearnedHostsAreBounded: however many hosts redirects name, at most
// maxLearned are remembered, the soonest to expire going first.
func TestLearnedHostsAreBounded(t *testing.T) {
	clock := testkit.NewClock()
	l := NewLearned(clock.Now)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range maxLearned {
				u, _ := url.Parse(fmt.Sprintf("https://s%d-%d.test/x", g, i))
				l.Learn("docker:https://hub", u)
			}
		})
	}
	wg.Wait()
	if n := len(l.Current()); n != maxLearned {
		t.Fatalf("%d learned hosts, want the bound %d", n, maxLearned)
	}
	// Which host goes: learn maxLearned hosts a second apart, refresh the
	// first, then learn one more. s1 is now the soonest to expire.
	clock = testkit.NewClock()
	l = NewLearned(clock.Now)
	learn := func(host string) {
		u, _ := url.Parse("https://" + host + "/x")
		l.Learn("docker:https://hub", u)
	}
	for i := range maxLearned {
		learn(fmt.Sprintf("s%d.test", i))
		clock.Advance(time.Second)
	}
	learn("s0.test")
	learn("new.test")
	if n := len(l.Current()); n != maxLearned {
		t.Fatalf("%d learned hosts after one more, want the bound %d", n, maxLearned)
	}
	if _, ok := l.Lookup("s1.test", "443"); ok {
		t.Error("s1.test, the soonest to expire, is still learned")
	}
	for _, host := range []string{"s0.test", "s2.test", "new.test"} {
		if _, ok := l.Lookup(host, "443"); !ok {
			t.Errorf("%s was dropped, want only s1.test gone", host)
		}
	}
	for _, raw := range []string{"ftp://x.test/", "https:///nohost", "mailto:a@b"} {
		u, _ := url.Parse(raw)
		if l.Learn("k", u) {
			t.Errorf("learned from %q", raw)
		}
	}
}
