package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
	"github.com/nora-breaker/nora-breaker/stale"
)

// Helpers shared by the fallback_* and stale_* end-to-end tests.

// fbKeys returns the breaker keys of format's upstreams, in config order.
func fbKeys(t testing.TB, tp *testProxy, format string) []string {
	t.Helper()
	var out []string
	for _, u := range tp.Config().Upstreams {
		if u.Format == format {
			out = append(out, u.Key)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s upstreams configured", format)
	}
	return out
}

// getURL is request for a plain GET.
func getURL(t testing.TB, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	return request(t, c, http.MethodGet, url, nil)
}

func fbForceOpen(t testing.TB, tp *testProxy, key string) {
	t.Helper()
	if err := tp.Breakers().Force(key, breakerstate.ModeOpen); err != nil {
		t.Fatal(err)
	}
}

// fbWaitStored waits until the stale cache holds an entry for a GET of url
// with hdr, as format's key rules see it. Entries are committed in the
// background after the body ends, so this polls with a deadline.
func fbWaitStored(t testing.TB, tp *testProxy, format, url string, hdr http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	sc := tp.Config().Sidecar
	ref, ok := stale.Policy{Mode: sc.StaleAuthenticated, CredentialHeaders: sc.CredentialHeaders}.For(req, format)
	if !ok {
		t.Fatalf("%s is not cacheable", url)
	}
	stored := testkit.Poll(10*time.Second, func() bool {
		e, ok := tp.stale.Find(ref)
		if ok {
			e.Body.Close()
		}
		return ok
	})
	if !stored {
		t.Fatalf("%s never reached the stale cache", url)
	}
}

// fbHeader builds an http.Header from name/value pairs.
func fbHeader(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}
