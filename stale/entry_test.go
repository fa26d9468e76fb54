package stale

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

func TestEntryResponse(t *testing.T) {
	clk := testkit.NewClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	c, _ := newTestCache(t, Options{Now: clk.Now})
	resp := okResponse(strings.NewReader("packument"), 9)
	resp.Header.Set("Content-Type", "application/vnd.npm.install-v1+json")
	resp.Header.Set("Age", "500")
	tee(c, "k", resp)
	io.ReadAll(resp.Body)
	resp.Body.Close()
	c.commits.Wait()

	tests := []struct {
		name    string
		method  string
		elapsed time.Duration
		wantAge string
		body    string
	}{
		{"GET after 90.9s", http.MethodGet, 90*time.Second + 900*time.Millisecond, "90", "packument"},
		{"HEAD has no body", http.MethodHead, time.Second, "1", ""},
		{"clock went backwards", http.MethodGet, -time.Hour, "0", "packument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := lookup(c, "k")
			if !ok {
				t.Fatal("miss")
			}
			req := httptest.NewRequest(tt.method, "https://registry.npmjs.org/x", nil)
			r := e.Response(req, clk.Now().Add(tt.elapsed))
			defer r.Body.Close()
			if r.StatusCode != http.StatusOK || r.Status != "200 OK" {
				t.Errorf("status %d %q", r.StatusCode, r.Status)
			}
			checks := map[string]string{
				"x-nora-stale":   "true",
				"Age":            tt.wantAge,
				"Content-Length": "9",
				"Content-Type":   "application/vnd.npm.install-v1+json",
			}
			for k, want := range checks {
				if got := r.Header.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if r.ContentLength != 9 || r.Request != req {
				t.Errorf("ContentLength %d, Request %p", r.ContentLength, r.Request)
			}
			if b, _ := io.ReadAll(r.Body); string(b) != tt.body {
				t.Errorf("body %q, want %q", b, tt.body)
			}
		})
	}
}
