//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// toxiproxy is a running toxiproxy server driven through its HTTP API.
type toxiproxy struct {
	api string
	c   *http.Client
}

// startToxiproxy starts the toxiproxy server installed by run.sh.
func startToxiproxy(t *testing.T, s suite, dir string) *toxiproxy {
	t.Helper()
	port := freePort(t)
	startProc(t, dir, "toxiproxy", cleanEnv(), filepath.Join(s.tools, "toxiproxy-server"),
		"-host", "127.0.0.1", "-port", strconv.Itoa(port))
	tp := &toxiproxy{api: fmt.Sprintf("http://127.0.0.1:%d", port),
		c: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	waitHTTP(t, tp.api+"/version", 200, 20*time.Second)
	return tp
}

// call sends one API request and fails the test on an unexpected status.
func (tp *toxiproxy) call(t *testing.T, method, path string, body any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, tp.api+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := tp.c.Do(req)
	if err != nil {
		t.Fatalf("toxiproxy %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("toxiproxy %s %s: %d %s", method, path, resp.StatusCode, msg)
	}
}

// proxy creates a toxiproxy listener on a free loopback port forwarding to
// upstream and returns its address.
func (tp *toxiproxy) proxy(t *testing.T, name, upstream string) string {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tp.call(t, "POST", "/proxies", map[string]any{"name": name, "listen": listen, "upstream": upstream, "enabled": true})
	waitPort(t, listen, 10*time.Second)
	return listen
}

// addToxic installs a toxic on both directions' upstream side of a proxy.
func (tp *toxiproxy) addToxic(t *testing.T, proxy, toxic, kind string, attrs map[string]any) {
	t.Helper()
	tp.call(t, "POST", "/proxies/"+proxy+"/toxics", map[string]any{
		"name": toxic, "type": kind, "stream": "upstream", "toxicity": 1.0, "attributes": attrs})
}

// removeToxic takes a toxic away again.
func (tp *toxiproxy) removeToxic(t *testing.T, proxy, toxic string) {
	t.Helper()
	tp.call(t, "DELETE", "/proxies/"+proxy+"/toxics/"+toxic, nil)
}
