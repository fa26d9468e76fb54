package format

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
	"github.com/nora-breaker/nora-breaker/stale"
)

func TestSetOf(t *testing.T) {
	s := Set{"maven": Plain{FinalNotFound: true}}
	if !s.Of("maven").NotFoundIsFinal() {
		t.Error("maven's own Format was not used")
	}
	if s.Of("npm") != (Plain{}) || (Set(nil)).Of("npm") != (Plain{}) {
		t.Error("a format without an entry is not Plain")
	}
}

// TestPlainStaleIsThePolicysKey: Plain keys a request as the stale policy
// keys any request of its format (npm's packuments by Accept, for one).
func TestPlainStaleIsThePolicysKey(t *testing.T) {
	u := testkit.ConfigUpstream(t, "npm", "https://registry.test")
	req := httptest.NewRequest(http.MethodGet, "https://registry.test/left-pad", nil)
	req.Header.Set("Accept", "application/vnd.npm.install-v1+json")
	p := stale.Policy{Mode: "isolate"}
	want, wantOK := p.For(req, "npm")
	got, ok := Plain{}.Stale(u, req, p)
	if ok != wantOK || got.Ref.Key != want.Key || got.OwnHead {
		t.Errorf("Stale = %+v %v, want %+v %v and no HEAD copy of its own", got, ok, want, wantOK)
	}
}
