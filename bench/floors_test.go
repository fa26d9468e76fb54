package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestBareHandler(t *testing.T) {
	rec := httptest.NewRecorder()
	bareHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/any/path", nil))
	if rec.Code != http.StatusOK || rec.Body.Len() != smallBody || rec.Header().Get("Content-Length") != "1024" {
		t.Fatalf("bare answer: %d, %d bytes, headers %v", rec.Code, rec.Body.Len(), rec.Header())
	}
}

// TestMiniProxyForwards: an absolute-form GET through the mini proxy reaches
// the upstream with its path and comes back whole; an origin-form request
// (not a proxy request) is refused.
func TestMiniProxyForwards(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream saw "+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	mp := httptest.NewServer(miniProxy())
	t.Cleanup(mp.Close)
	c := newClient(clientOpts{conns: 1, proxy: mp.URL, timeout: 5 * time.Second})
	resp, err := c.Get(up.URL + "/g/a/1/a-1.jar")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "upstream saw /g/a/1/a-1.jar" {
		t.Fatalf("through the mini proxy: %d %q", resp.StatusCode, b)
	}
	resp, err = http.Get(mp.URL + "/g/a/1/a-1.jar")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("origin-form request to the mini proxy: %d, want 400", resp.StatusCode)
	}
}

// TestLoopbackOnlyDial: the mini proxy's dialer refuses an address off
// loopback before dialling. The context is already cancelled, so even a
// broken guard sends nothing: it would report the cancellation instead.
func TestLoopbackOnlyDial(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for addr, refused := range map[string]bool{
		"192.0.2.1:80":     true,
		"example.org:80":   true,
		"127.0.0.1:80":     false,
		"[::1]:80":         false,
		"h0001.bench.test": true, // no port: not an address
		"bench.test:443":   false,
	} {
		_, err := loopbackOnlyDial(ctx, "tcp", addr)
		if err == nil {
			t.Errorf("%s: dial with a cancelled context succeeded", addr)
			continue
		}
		if got := strings.Contains(err.Error(), "not a loopback address") || strings.Contains(err.Error(), "missing port"); got != refused {
			t.Errorf("%s: refused by the guard = %v (%v), want %v", addr, got, err, refused)
		}
	}
}
