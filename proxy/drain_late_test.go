package proxy

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// Connections handed over during the drain (docs/behaviour.md §8): a
// handler that was still deciding when the shutdown began (a CONNECT being
// dialled or in its TLS handshake, a websocket handshake waiting for the
// upstream's 101) hijacks its connection afterwards, when net/http's
// shutdown has stopped counting it. On main none of them was drained: the
// drain had found nothing live and returned, Serve returned (the process
// exits), and the connection was cut.

// beginShutdown starts tp's shutdown and returns once the drain has begun
// (/ready says 503); stopped is closed when Serve has returned.
func beginShutdown(t *testing.T, tp *testProxy) (stopped <-chan struct{}) {
	t.Helper()
	done := make(chan struct{})
	go func() { tp.stop(); close(done) }()
	testkit.PollUntil(t, 5*time.Second, func() bool {
		select {
		case <-done:
			return true
		default:
		}
		resp, err := http.Get(tp.AdminURL + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	return done
}

// TestShutdownWaitsForATunnelBeingOpened: a blind tunnel whose CONNECT is
// still with the parent proxy (slow to connect, as a corporate egress
// proxy to a far host is) when the shutdown begins is opened and relays
// the whole download before Serve returns.
func TestShutdownWaitsForATunnelBeingOpened(t *testing.T) {
	slow := &slowDownloads{}
	blind := newTLSUpstream(t, slow.serve)
	maven := newUpstream(t, func(http.ResponseWriter, *http.Request) {})
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	parent := testkit.StartParent(t, &testkit.Parent{Decide: func(r *http.Request) testkit.ParentAnswer {
		if r.Method == http.MethodConnect {
			once.Do(func() { close(arrived) })
			<-release
		}
		return testkit.ParentAnswer{}
	}})
	cfg := testkit.LoadConfig(t, ixMaven(maven.URL, true, "[sidecar]\nparent_proxy = \""+parent.URL+"\"\n"+
		allowHostsLine(blind)+"\n"), nil)
	tp := startProxyWith(t, cfg, zerolog.Nop(), nil, 20*time.Second)
	c := proxyClient(t, tp, blind.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs)
	c.Timeout = time.Minute
	d := &download{name: "blind tunnel through a slow parent", c: c, url: blind.URL + "/blob"}
	downloaded := make(chan struct{})
	go func() { d.run(); close(downloaded) }()
	<-arrived
	stopped := beginShutdown(t, tp)
	close(release)
	<-downloaded
	// On main the tunnel was cut as Serve returned: the download failed.
	if want := sha256.Sum256(drainPayload()); d.err != nil || d.sum != want {
		t.Errorf("download through a tunnel opened during the drain: %d bytes, %v", d.n, d.err)
	}
	<-stopped
}

// TestShutdownServesAnInterceptedTunnelStillInItsHandshake: a client whose
// CONNECT was answered but whose TLS handshake comes only after the drain
// began gets its request answered inside the tunnel.
func TestShutdownServesAnInterceptedTunnelStillInItsHandshake(t *testing.T) {
	up := newTLSUpstream(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "pom") })
	lines, pool := interceptCA(t, up.Server)
	cfg := testkit.LoadConfig(t, ixMaven(up.URL, true, "[sidecar]\n"+lines), nil)
	tp := startProxyWith(t, cfg, zerolog.Nop(), nil, 20*time.Second)
	target := strings.TrimPrefix(up.URL, "https://")
	resp, conn, _ := ixRawConnect(t, tp, target)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	stopped := beginShutdown(t, tp)
	tc := tls.Client(conn, &tls.Config{RootCAs: pool, Time: tp.Clock.Now, ServerName: "127.0.0.1",
		NextProtos: []string{"http/1.1"}})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(tc, "GET /maven2/g/a/1/a-1.pom HTTP/1.1\r\nHost: %s\r\n\r\n", target)
	got, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("a request in a tunnel whose handshake came during the drain: %v", err)
	}
	body, err := io.ReadAll(got.Body)
	if got.StatusCode != http.StatusOK || string(body) != "pom" || err != nil {
		t.Fatalf("got %d %q %v, want the upstream's 200", got.StatusCode, body, err)
	}
	tc.Close()
	<-stopped
}

// TestShutdownKeepsAWebsocketSwitchedDuringTheDrain: a websocket handshake
// on the plain port whose 101 comes after the drain began relays the
// messages its client sends afterwards (a switched connection carrying
// bytes is relayed until the grace ends) and Serve does not return under
// it.
func TestShutdownKeepsAWebsocketSwitchedDuringTheDrain(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(arrived) })
		<-release
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		buf := make([]byte, 4)
		for {
			if _, err := io.ReadFull(brw, buf); err != nil {
				return
			}
			if _, err := conn.Write(buf); err != nil {
				return
			}
		}
	})
	cfg := testkit.LoadConfig(t, ixMaven(up.URL, true, ""), nil)
	tp := startProxyWith(t, cfg, zerolog.Nop(), nil, 20*time.Second)
	conn, err := net.Dial("tcp", tp.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	host := strings.TrimPrefix(up.URL, "http://")
	io.WriteString(conn, "GET "+up.URL+"/maven2/ws HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\n"+
		"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	<-arrived
	stopped := beginShutdown(t, tp)
	close(release)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake in flight at the shutdown: %v %v, want its 101", resp, err)
	}
	// The client goes on talking, a message every 100 ms for a second.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := range 10 {
		<-tick.C
		select {
		case <-stopped:
			t.Fatalf("Serve returned (the process would exit) after %d messages on a websocket carrying bytes", i)
		default:
		}
		msg := fmt.Sprintf("m%03d", i)
		io.WriteString(conn, msg)
		got := make([]byte, 4)
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("message %d on the websocket switched during the drain: %q, %v; want it echoed", i, got, err)
		}
	}
	conn.Close()
	<-stopped
}
