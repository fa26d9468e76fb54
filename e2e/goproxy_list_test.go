//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGoProxyListThroughAnOutage: go mod download with a GOPROXY list
// whose first entry is the module proxy nora-breaker guards (its breaker
// forced open) and whose second is another module proxy (plain HTTP, no
// upstream of the proxy's). go goes on to the next entry after a comma only
// on 404 or 410, after a pipe on any error: with "A,B" the proxy's 503
// stops it at once, with "A|B" it is served by B. The proxy says the truth
// (503, not a 404 that would also send "A,direct" users on); the list's
// separator is the user's choice, and these runs are what each gives.
func TestGoProxyListThroughAnOutage(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	rootA := filepath.Join(dir, "goproxy-a")
	writeModuleProxy(t, rootA)
	ca := newOriginCA(t, dir)
	tlsCfg := ca.serverTLS(t, "goproxy-a.test")
	tlsCfg.NextProtos = []string{"http/1.1"}
	frontA := newFront(t, "goproxy-a", "", http.FileServer(http.Dir(rootA)), tlsCfg)
	rootB := filepath.Join(dir, "goproxy-b")
	writeModuleProxy(t, rootB)
	frontB := newFront(t, "goproxy-b", "", http.FileServer(http.Dir(rootB)), nil)
	n := startNora(t, s, dir, noraOpts{
		formats: breakerTOML(2, 60*time.Second, "go") + `[go]
proxy = "https://goproxy-a.test"
proxy_timeout = 5
`,
		resolve:       map[string]string{"goproxy-a.test:443": frontA.addr, "goproxy-b.test:8090": frontB.addr},
		upstreamCA:    ca.pemPath,
		allowUnlisted: true, // goproxy-b.test is no upstream's
	})
	resp, err := n.c.Post(n.admin+"/breakers/force?key=go&state=open", "", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("force go open: %v %v", resp, err)
	}
	resp.Body.Close()
	runs := 0
	download := func(goproxy string) clientRun {
		runs++
		env := cleanEnv("HOME="+dir, "GOPROXY="+goproxy, "GOSUMDB=off", "GONOSUMDB=*", "GOFLAGS=-mod=mod -modcacherw",
			"GOTOOLCHAIN=local", "GOINSECURE=goproxy-b.test", fmt.Sprintf("GOMODCACHE=%s/modcache-%d", dir, runs),
			"GOPATH="+filepath.Join(dir, "gopath"), "HTTPS_PROXY="+n.proxyURL, "HTTP_PROXY="+n.proxyURL, "SSL_CERT_FILE="+n.bundle)
		return runClient(t, dir, env, 3*time.Minute, "go", "mod", "download", "-json", "example.test/mod@v0.1.0")
	}
	comma := download("https://goproxy-a.test,http://goproxy-b.test:8090")
	if comma.err == nil || !strings.Contains(comma.out, "503") {
		t.Errorf(`GOPROXY "A,B" with A's breaker open: %v, want the proxy's 503 to stop go`+"\n%s", comma.err, tail(comma.out, 1500))
	}
	if comma.wall > 10*time.Second {
		t.Errorf(`GOPROXY "A,B" took %s to fail`, comma.wall)
	}
	b0, _ := frontB.count()
	pipe := download("https://goproxy-a.test|http://goproxy-b.test:8090")
	if pipe.err != nil || !strings.Contains(pipe.out, `"Zip"`) {
		t.Errorf(`GOPROXY "A|B" with A's breaker open: %v, want B to serve`+"\n%s", pipe.err, tail(pipe.out, 1500))
	}
	if b1, _ := frontB.count(); b1 == b0 {
		t.Error(`GOPROXY "A|B": B saw no request`)
	}
	summary("go mod download, GOPROXY list of the guarded proxy A and another B", "A's breaker forced open",
		fmt.Sprintf(`"A,B" stops on the 503 in %.2fs; "A|B" is served by B in %.2fs`, comma.wall.Seconds(), pipe.wall.Seconds()),
		comma.wall+pipe.wall, frontA.seen()+" "+frontB.seen())
}
