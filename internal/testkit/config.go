package testkit

import (
	"net/url"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/config"
)

// ConfigUpstream is a configured upstream of format at rawURL, keyed
// "<format>:<rawURL>" as config keys an upstream of a chain, with 5 s for
// both its header wait and its body's idle time.
func ConfigUpstream(t testing.TB, format, rawURL string) *config.Upstream {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return &config.Upstream{Format: format, URL: u, Key: format + ":" + rawURL, Hosts: []string{u.Hostname()},
		ProxyTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second}
}
