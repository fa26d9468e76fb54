package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestServeUsesStartSettingsAfterAnEarlyReload: idle_timeout and
// max_connections need a restart, so a reload that lands between New and
// Serve (main starts watching for reloads before it serves) changes
// neither: the listener's limit and the servers' idle timeout are the
// values the proxy was built with, like everything else p.fixed holds.
func TestServeUsesStartSettingsAfterAnEarlyReload(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	start := testkit.LoadConfig(t, ixMaven(up.URL, true, "[sidecar]\nmax_connections = 1\nidle_timeout = \"2s\"\n"), nil)
	later := testkit.LoadConfig(t, ixMaven(up.URL, true, "[sidecar]\nmax_connections = 3\nidle_timeout = \"1h\"\n"), nil)
	p, err := New(start, Deps{Registry: prometheus.NewRegistry(), Logger: zerolog.Nop(), Now: testkit.NewClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	restart, err := p.Reload(later)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(restart, "max_connections") || !slices.Contains(restart, "idle_timeout") {
		t.Fatalf("reload reports %q as needing a restart", restart)
	}
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, proxyLn, adminLn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	req := "GET " + up.URL + "/maven2/x HTTP/1.1\r\nHost: x\r\n\r\n"
	held, err := net.Dial("tcp", proxyLn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(held, req)
	buf := make([]byte, 12)
	if _, err := io.ReadFull(held, buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Fatalf("first connection: %q %v", buf, err)
	}
	// The first connection holds the only slot: a second one is refused.
	second, err := net.Dial("tcp", proxyLn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(second, req)
	if _, err := io.ReadFull(second, buf); err != nil || string(buf) != "HTTP/1.1 503" {
		t.Fatalf("second connection under max_connections = 1: %q %v, want 503", buf, err)
	}
	// The first, now idle, is closed after the start's 2s idle_timeout,
	// long before the reloaded hour (the read ends at the deadline if not).
	held.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err = io.ReadAll(held)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("idle keep-alive connection still open after 15s: the servers took the reloaded idle_timeout")
	}
}
