package charttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeCluster is just enough of a Kubernetes API server, on loopback, for
// helm's `lookup` and for `helm install --dry-run=server`: discovery of the
// kinds the chart renders, GETs of named objects (404 unless the test put
// one there) and empty lists (helm's release storage). Nothing is ever
// created: a dry run only reads.
type fakeCluster struct {
	srv     *httptest.Server
	mu      sync.Mutex
	objects map[string]any // API path → object
	seen    []string       // every path asked for, in order
}

// fakeResources are the kinds the fake serves, per group version.
var fakeResources = map[string][]struct{ name, kind string }{
	"v1": {{"secrets", "Secret"}, {"configmaps", "ConfigMap"}, {"services", "Service"},
		{"serviceaccounts", "ServiceAccount"}, {"persistentvolumeclaims", "PersistentVolumeClaim"}, {"pods", "Pod"}},
	"apps/v1":              {{"deployments", "Deployment"}},
	"policy/v1":            {{"poddisruptionbudgets", "PodDisruptionBudget"}},
	"networking.k8s.io/v1": {{"networkpolicies", "NetworkPolicy"}},
}

func newFakeCluster(t *testing.T) *fakeCluster {
	t.Helper()
	c := &fakeCluster{objects: map[string]any{}}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

// put makes an object exist at its API path, e.g.
// /apis/apps/v1/namespaces/build/deployments/ci-nora-breaker.
func (c *fakeCluster) put(path string, obj any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.objects[path] = obj
}

// asked reports whether helm asked for path.
func (c *fakeCluster) asked(path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.seen {
		if p == path {
			return true
		}
	}
	return false
}

func (c *fakeCluster) serve(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.seen = append(c.seen, r.URL.Path)
	obj, found := c.objects[r.URL.Path]
	c.mu.Unlock()
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	if r.Method != http.MethodGet {
		reply(http.StatusMethodNotAllowed, status(405, "MethodNotAllowed", "the fake cluster only reads"))
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case found:
		reply(http.StatusOK, obj)
	case path == "/version":
		reply(http.StatusOK, map[string]string{"major": "1", "minor": "31", "gitVersion": "v1.31.0"})
	case path == "/api":
		reply(http.StatusOK, map[string]any{"kind": "APIVersions", "versions": []string{"v1"}})
	case path == "/apis":
		reply(http.StatusOK, apiGroups())
	case path == "/api/v1" || strings.HasPrefix(path, "/apis/") && strings.Count(path, "/") == 3:
		gv := strings.TrimPrefix(strings.TrimPrefix(path, "/apis/"), "/api/")
		if _, ok := fakeResources[gv]; !ok {
			reply(http.StatusNotFound, status(404, "NotFound", "no group version "+gv))
			return
		}
		reply(http.StatusOK, resourceList(gv))
	case isList(path):
		reply(http.StatusOK, map[string]any{"kind": "List", "apiVersion": "v1", "metadata": map[string]any{}, "items": []any{}})
	default:
		reply(http.StatusNotFound, status(404, "NotFound", path+" not found"))
	}
}

// isList reports a collection path: .../namespaces/<ns>/<resource>.
func isList(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	return len(parts) >= 3 && parts[len(parts)-3] == "namespaces"
}

func status(code int, reason, msg string) map[string]any {
	return map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
		"message": msg, "code": code}
}

func apiGroups() map[string]any {
	var groups []any
	for gv := range fakeResources {
		group, version, ok := strings.Cut(gv, "/")
		if !ok {
			continue
		}
		v := map[string]string{"groupVersion": gv, "version": version}
		groups = append(groups, map[string]any{"name": group, "versions": []any{v}, "preferredVersion": v})
	}
	return map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
}

func resourceList(gv string) map[string]any {
	var list []any
	for _, r := range fakeResources[gv] {
		list = append(list, map[string]any{"name": r.name, "singularName": "", "namespaced": true, "kind": r.kind,
			"verbs": []string{"get", "list"}})
	}
	return map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}
}

// env is the environment that points helm at the fake cluster, with helm's
// and kubectl's caches and settings in a temporary home.
func (c *fakeCluster) env(t *testing.T) []string {
	t.Helper()
	home := t.TempDir()
	kubeconfig := filepath.Join(home, "kubeconfig")
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: not-a-secret}}]
contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: %s}}]
current-context: fake
`, c.srv.URL, namespace)
	if err := os.WriteFile(kubeconfig, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"KUBECONFIG=" + kubeconfig, "HOME=" + home, "HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"), "HELM_DATA_HOME=" + filepath.Join(home, "data"),
		"NO_PROXY=127.0.0.1", "HTTPS_PROXY=", "HTTP_PROXY="}
}
