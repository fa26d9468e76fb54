package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

func get(t *testing.T, rt http.RoundTripper, ctx context.Context, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rt.RoundTrip(req)
}

func TestUpstreamScriptOverLoopback(t *testing.T) {
	up := NewUpstream(Status(502, "first"), Status(200, "then"))
	srv := up.Start(t)
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	for _, want := range []string{"502 first", "200 then", "200 then"} { // the last answer repeats
		resp, err := get(t, tr, context.Background(), srv.URL+"/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := fmt.Sprintf("%d %s", resp.StatusCode, body); got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	if up.Hits() != 3 {
		t.Errorf("hits %d, want 3", up.Hits())
	}
	up.Script(Status(404, ""))
	resp, err := get(t, tr, context.Background(), srv.URL+"/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 || up.Hits() != 4 {
		t.Errorf("after Script: %d with %d hits, want 404 with 4", resp.StatusCode, up.Hits())
	}
}

func TestTransportInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		streamed := make(chan struct{})
		tr := Transport{
			"ok.test": NewUpstream(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "5")
				w.WriteHeader(201)
				io.WriteString(w, "he")
				<-streamed
				io.WriteString(w, "llo")
			}),
			"hang.test":   NewUpstream(Hang),
			"hangup.test": NewUpstream(HangUp),
		}
		resp, err := get(t, tr, context.Background(), "http://ok.test/a")
		if err != nil || resp.StatusCode != 201 || resp.ContentLength != 5 {
			t.Fatalf("ok.test: %v %v", resp, err)
		}
		// The answer came back at its headers, before the body was done.
		close(streamed)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello" {
			t.Errorf("body %q", body)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := get(t, tr, ctx, "http://hang.test/a"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("hang.test: err %v, want the client's deadline", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("hang.test gave up after %v on the bubble's clock, want 3s", d)
		}
		if _, err := get(t, tr, context.Background(), "http://hangup.test/a"); !errors.Is(err, errAborted) {
			t.Errorf("hangup.test: err %v, want a transport error", err)
		}
		if _, err := get(t, tr, context.Background(), "http://nowhere.test/a"); err == nil {
			t.Error("a host without a handler answered")
		}
	})
}
