//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestContainerd: a real containerd daemon pulls through the intercepting
// proxy (ctr image pull, HEAD for the manifest first, as containerd does),
// healthy and then with registry A refusing connections: the pull is served
// by registry B, and the HEADs of a healthy pull never move A's breaker.
func TestContainerd(t *testing.T) {
	const reset = 5 * time.Second
	e := setupDocker(t, loadSuite(t), reset)
	key := "docker:https://registry-a.test:5000"
	// A goes down by refusing connections at toxiproxy: its front sees
	// nothing then, so the breaker's accounting counts nora's attempts.
	b := breakerCheck{n: e.n, key: key, reset: reset, seen: attemptsOf(t, e.n, key)}
	const ref = dockerImage
	pulls := 0
	pull := func() clientRun {
		pulls++
		c := startContainerd(t, filepath.Join(e.dir, fmt.Sprintf("containerd-%d", pulls)), containerdTrust{
			proxyURL: e.n.proxyURL, noraCA: e.n.caPEM, hosts: []string{"registry-a.test:5000"}})
		r, digest := c.mustPull(t, ref, "")
		if digest != e.digest {
			t.Fatalf("containerd pull %d: image digest %s, the registry has %s", pulls, digest, e.digest)
		}
		c.proc.stop()
		return r
	}

	healthy := pull()
	heads := e.frontA.pathsMatching("HEAD /v2/e2e/hello/manifests/")
	if len(heads) == 0 {
		t.Fatalf("containerd sent no HEAD for the manifest; registry A saw %v", e.frontA.pathsMatching("/v2/"))
	}
	if head := e.n.lastLog(t, `"method":"HEAD"`); head["status"] != float64(200) || head["result"] != "forwarded" {
		t.Fatalf("manifest HEAD through the proxy: want a forwarded 200, got %v", head)
	}
	if st := e.n.breaker(t, key); st.State != "closed" || st.FailureCount != 0 {
		t.Fatalf("healthy containerd pull moved A's breaker: %+v", st)
	}
	if tr := e.n.metric(t, "nora_circuit_breaker_transitions_total", fmt.Sprintf("registry=%q", key)); tr != 0 {
		t.Fatalf("healthy containerd pull: %v transitions of %s", tr, key)
	}
	if r, _ := e.frontB.count(); r != 0 {
		t.Fatalf("healthy containerd pull reached registry B (%d requests)", r)
	}

	// A down: toxiproxy's listener for it is closed, connections are refused.
	e.tp.setEnabled(t, "registry-a", false)
	var outage time.Duration
	for _, w := range b.openUntil(t, 4, pull) {
		outage += w
	}
	bBefore, _ := e.frontB.count()
	var open clientRun
	b.quietWhileOpen(t, func() { open = pull() })
	outage += open.wall
	if bAfter, _ := e.frontB.count(); bAfter <= bBefore {
		t.Fatal("containerd pull with A open was not served by registry B")
	}
	if len(e.frontB.pathsMatching("HEAD /v2/e2e/hello/manifests/")) == 0 {
		t.Fatalf("containerd's manifest HEAD did not reach registry B: %v", e.frontB.pathsMatching("/v2/"))
	}
	if e.n.metric(t, "nora_sidecar_fallback_total", fmt.Sprintf("from=%q", key)) == 0 {
		t.Fatal("no fallback counted from A")
	}

	e.tp.setEnabled(t, "registry-a", true)
	var back clientRun
	b.oneProbe(t, 0, func() { back = pull() })
	summary("containerd (ctr image pull, HTTPS intercepted)", "registry A refusing connections (toxiproxy disabled), then back",
		fmt.Sprintf("healthy pull %.2fs with %d manifest HEADs, A's breaker untouched; every pull ok from B while A down (open pull %.2fs); back on A after 1 probe (%.2fs)",
			healthy.wall.Seconds(), len(heads), open.wall.Seconds(), back.wall.Seconds()),
		outage, e.frontA.seen()+" "+e.frontB.seen())
}
