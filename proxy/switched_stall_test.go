package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSwitchedProtocolToAStalledUpstreamIdlesOut: a websocket whose
// upstream, after its 101, neither reads nor writes nor closes, while the
// client keeps sending, stops moving bytes once the buffers between them are
// full; it is closed after idle_timeout of that (docs/behaviour.md §5.1:
// idle_timeout on a tunnel, both parties) and its slot is free again.
func TestSwitchedProtocolToAStalledUpstreamIdlesOut(t *testing.T) {
	for _, intercepted := range []bool{false, true} {
		t.Run(fmt.Sprintf("intercepted=%v", intercepted), func(t *testing.T) { switchedStall(t, intercepted) })
	}
}

func switchedStall(t *testing.T, intercepted bool) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	stalled := func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		<-hold // stalled: never reads, writes or closes
	}
	idle := fmt.Sprintf("idle_timeout = %q\n", stallIdle.String())
	var conn net.Conn
	var target, host string
	if intercepted {
		ix := newIxInterceptWith(t, stalled, idle)
		host = strings.TrimPrefix(ix.up.URL, "https://")
		target = "/maven2/ws"
		conn = ixTLSInTunnel(t, ix.tp, ix.ca, host, "http/1.1")
	} else {
		up := newUpstream(t, stalled)
		tp := newTestProxy(t, ixMaven(up.URL, true, "[sidecar]\n"+idle), nil)
		c, err := net.Dial("tcp", tp.URL.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conn, host, target = c, strings.TrimPrefix(up.URL, "http://"), up.URL+"/maven2/ws"
	}
	io.WriteString(conn, "GET "+target+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\n"+
		"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	conn.SetDeadline(time.Time{}) // the proxy, not the test, must end it
	start := time.Now()
	ended := make(chan error, 1)
	go func() {
		chunk := make([]byte, 256<<10)
		for {
			if _, err := conn.Write(chunk); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the client's own deadline ended the websocket: %v", err)
		}
		t.Logf("the stalled websocket was closed after %v: %v", time.Since(start), err)
	case <-time.After(20*stallIdle + 10*time.Second):
		t.Fatalf("a websocket whose upstream stalled still open after %v", time.Since(start))
	}
}
