package proxy

import (
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestReloadRacingLearnedHostsKeepsTheNewBreakers: redirect-learning
// goroutines that give the breaker set a new host's key while reloads swap
// the configuration never leave the set configured from a configuration
// that is no longer in force. Each round learns new hosts from many
// goroutines while one reload switches between two configurations that
// differ in the enabled flag, a threshold and the key set; once they are
// all done the breaker set must be exactly the configuration in force plus
// the learned hosts. A sync that read the configuration before a reload and
// reconfigured after it would bring back the old enabled flag and key set:
// the new upstream's key would be unknown, and admitted with no breaker.
func TestReloadRacingLearnedHostsKeepsTheNewBreakers(t *testing.T) {
	const (
		rounds   = 60
		learners = 8
	)
	off := testkit.LoadConfig(t, `
[circuit_breaker]
enabled = false
failure_threshold = 3
[registries]
enable = "maven"
[maven]
proxies = ["http://repo.test/m2"]
`, nil)
	on := testkit.LoadConfig(t, `
[circuit_breaker]
enabled = true
failure_threshold = 7
[registries]
enable = "maven,npm"
[maven]
proxies = ["http://repo.test/m2", "http://mirror.test/m2"]
[npm]
proxies = ["http://npm.test"]
`, nil)
	clock := testkit.NewClock()
	p, err := New(off, Deps{Registry: prometheus.NewRegistry(), Logger: zerolog.Nop(), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	redirector := off.Upstreams[0].Key // in both configurations
	for round := range rounds {
		cfg := on
		if round%2 == 1 {
			cfg = off
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range learners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				target, _ := url.Parse(fmt.Sprintf("http://storage-%d-%d.test/blob", round, i))
				p.onRedirect(redirector, target)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := p.Reload(cfg); err != nil {
				t.Error(err)
			}
		}()
		close(start)
		wg.Wait()

		if got, want := p.breakers.Enabled(), cfg.CircuitBreaker.Enabled; got != want {
			t.Fatalf("round %d: breakers enabled = %v under a configuration with enabled = %v", round, got, want)
		}
		snap := p.state.Load()
		want := append(keySettings(snap.cfg), p.learnedKeySettings(snap, configuredKeys(snap))...)
		var got []string
		for _, s := range p.breakers.Snapshot() {
			got = append(got, s.Key)
			if i := slices.IndexFunc(want, func(k breakerstate.KeySettings) bool { return k.Key == s.Key }); i >= 0 &&
				s.Threshold != want[i].FailureThreshold {
				t.Fatalf("round %d: %s threshold %d, want %d", round, s.Key, s.Threshold, want[i].FailureThreshold)
			}
		}
		// The learned hosts come in no particular order.
		wantKeys := keyNames(want)
		slices.Sort(got)
		slices.Sort(wantKeys)
		if !slices.Equal(got, wantKeys) {
			t.Fatalf("round %d: breaker keys\n%q\nwant\n%q", round, got, wantKeys)
		}
	}
}
