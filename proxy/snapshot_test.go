package proxy

import (
	"testing"

	"github.com/nora-breaker/nora-breaker/dial"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

func TestSnapshotAllowListsAndConnectPorts(t *testing.T) {
	cfg := testkit.LoadConfig(t, `
[registries]
enable = "maven"
[maven]
proxies = ["http://repo.example:8081/m2", "https://mirror.example/m2"]
[sidecar]
allow_hosts = ["GitHub.com", "objects.example:8443", "[::1]:9000"]
`, nil)
	st, err := newSnapshot(cfg, nil, nil, nil, dial.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	hosts := []struct {
		host, port string
		want       bool
	}{
		{"github.com", "443", true},
		{"GITHUB.COM", "22", true}, // a bare host allows every port
		{"objects.example", "8443", true},
		{"objects.example", "443", false}, // host:port allows only that port
		{"::1", "9000", true},
		{"::1", "9001", false},
		{"repo.example", "8081", false}, // upstreams are not allow_hosts
	}
	for _, h := range hosts {
		if got := st.policy.Allowed(h.host, h.port); got != h.want {
			t.Errorf("hostAllowed(%q, %q) = %v, want %v", h.host, h.port, got, h.want)
		}
	}
	for port, want := range map[string]bool{"443": true, "8081": true, "8443": true, "9000": true, "22": false, "80": false} {
		if got := st.connectPorts[port]; got != want {
			t.Errorf("connectPorts[%s] = %v, want %v", port, got, want)
		}
	}
}
