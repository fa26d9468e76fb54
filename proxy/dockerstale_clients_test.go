package proxy

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// A cache warmed by one docker client serves the others (issue 27.2,
// docs/behaviour.md §6.1): a pull in the docker daemon's and skopeo's way
// (ping, token, GET the tag with one Accept list) leaves what a pull in
// containerd's way (no ping, HEAD the tag without and then with a token,
// GET by digest, another Accept list) needs during an outage, and the
// reverse; a private image stays its owner's.
func TestDockerStaleCopiesServeEveryClient(t *testing.T) {
	for _, c := range []struct {
		name         string
		warm, outage func(h *fakeHub, tp *testProxy) error
	}{
		{"skopeo-style stored, containerd-style pulls",
			func(h *fakeHub, tp *testProxy) error {
				return checkLayer(pull(proxyClient(t, tp, nil), "library/app", ""))
			},
			func(h *fakeHub, tp *testProxy) error {
				return checkLayer(pullLikeContainerd(proxyClient(t, tp, nil), "library/app"))
			}},
		{"containerd-style stored, skopeo-style pulls",
			func(h *fakeHub, tp *testProxy) error {
				return checkLayer(pullLikeContainerd(proxyClient(t, tp, nil), "library/app"))
			},
			func(h *fakeHub, tp *testProxy) error {
				return checkLayer(pull(proxyClient(t, tp, nil), "library/app", ""))
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, tp := newHubProxy(t)
			if err := c.warm(h, tp); err != nil {
				t.Fatalf("healthy pull: %v", err)
			}
			waitCommits(t, tp)
			h.down.Store(true)
			if err := c.outage(h, tp); err != nil {
				t.Fatalf("pull with registry, realm and storage down: %v", err)
			}
		})
	}
	t.Run("a private image stays its owner's", func(t *testing.T) {
		h, tp := newHubProxy(t)
		if _, err := pull(proxyClient(t, tp, nil), privateRepo, "alice"); err != nil {
			t.Fatalf("alice's healthy pull: %v", err)
		}
		waitCommits(t, tp)
		h.down.Store(true)
		if _, err := pullLikeContainerd(proxyClient(t, tp, nil), privateRepo); err == nil {
			t.Fatal("an anonymous containerd-style pull got alice's private image from stale copies")
		}
		if _, err := pull(proxyClient(t, tp, nil), privateRepo, "alice"); err != nil {
			t.Fatalf("alice's own pull from stale copies: %v", err)
		}
	})
}

// layerBody is what every fakeHub of these tests serves as its public layer.
const layerBody = "public layer of the cross-client test"

func checkLayer(b []byte, err error) error {
	if err == nil && string(b) != layerBody {
		err = fmt.Errorf("layer %q, want %q", b, layerBody)
	}
	return err
}

// newHubProxy is a fakeHub (a public and a private layer) behind a proxy
// with a stale cache.
func newHubProxy(t *testing.T) (*fakeHub, *testProxy) {
	h := newFakeHub(t)
	h.addBlob([]byte(layerBody))
	h.addBlob([]byte("private layer " + randomHex()))
	addr := func(u *upstream) string { return strings.TrimPrefix(u.URL, "http://") }
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 3
[registries]
enable = "docker"
[[docker.upstreams]]
url = "http://hub.test"
[sidecar]
stale_dir = %q
[sidecar.aliases]
"docker:http://hub.test" = ["auth.hub.test", "cdn.hub.test"]
[sidecar.resolve]
"hub.test:80" = %q
"auth.hub.test:80" = %q
"cdn.hub.test:80" = %q
`, filepath.Join(t.TempDir(), "stale"), addr(h.hub), addr(h.realm), addr(h.cdn)), nil)
	return h, tp
}

// waitCommits waits until the copies of the pull just made are committed.
// Every body was read to its end, so each commit has started; Close waits
// for them (and stores nothing more, which the outage does not need).
func waitCommits(t *testing.T, tp *testProxy) {
	t.Helper()
	if err := tp.stale.Close(); err != nil {
		t.Fatal(err)
	}
}
