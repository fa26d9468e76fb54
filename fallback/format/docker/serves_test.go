package docker

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestMayAnswerOnlyTheNamedRegistry: a request that names its registry
// (containerd's ?ns= to a mirror) may only be answered by a candidate that
// serves it; one that names none by any candidate.
func TestMayAnswerOnlyTheNamedRegistry(t *testing.T) {
	hub := testkit.ConfigUpstream(t, "docker", "https://registry-1.docker.io")
	hub.Serves = []string{"docker.io"}
	ghcr := testkit.ConfigUpstream(t, "docker", "https://ghcr.io")
	ghcr.Serves = []string{"ghcr.io"}
	mirror := testkit.ConfigUpstream(t, "docker", "https://mirror.test")
	mirror.Serves = []string{"mirror.test", "docker.io", "ghcr.io"}
	local := testkit.ConfigUpstream(t, "docker", "http://reg.test:5000")
	local.Serves = []string{"reg.test:5000"}
	for _, tc := range []struct {
		query string
		cand  *config.Upstream
		want  bool
	}{
		{"", hub, true},
		{"n=10", ghcr, true},
		{"ns=docker.io", hub, true},
		{"ns=ghcr.io", hub, false},
		{"ns=ghcr.io", ghcr, true},
		{"ns=GHCR.io", ghcr, true},
		{"ns=ghcr.io", mirror, true},
		{"ns=docker.io", mirror, true},
		{"ns=quay.io", mirror, false},
		{"ns=registry-1.docker.io", hub, true},
		{"ns=reg.test:5000", local, true},
		{"ns=reg.test", local, false},
		{"ns=", hub, false},
		{"ns=docker.io&ns=ghcr.io", hub, false},
		{"ns=docker.io&ns=ghcr.io", mirror, true},
	} {
		req := httptest.NewRequest(http.MethodHead, "https://mirror.test/v2/team/app/manifests/1?"+tc.query, nil)
		if got := (&Format{}).MayAnswer(req, tc.cand); got != tc.want {
			t.Errorf("?%s at %s (serves %q): %v, want %v", tc.query, tc.cand.Key, tc.cand.Serves, got, tc.want)
		}
	}
}
