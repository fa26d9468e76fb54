package tunnel

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/relay"
)

func TestEstablishedSpeaksTheClientsVersion(t *testing.T) {
	for _, tc := range []struct {
		major, minor int
		want         string
	}{{1, 0, "HTTP/1.0 200"}, {1, 1, "HTTP/1.1 200"}, {0, 0, "HTTP/1.1 200"}} {
		if got := Established(&http.Request{ProtoMajor: tc.major, ProtoMinor: tc.minor}); !strings.HasPrefix(got, tc.want) ||
			!strings.HasSuffix(got, "\r\n\r\n") {
			t.Errorf("HTTP/%d.%d: %q, want %s … CRLF CRLF", tc.major, tc.minor, got, tc.want)
		}
	}
}

// TestInterceptorServesPlainHTTPInsideTheTunnel: after the 200, requests
// inside the tunnel reach the handler with the CONNECT target and a whole
// URL, and the handler's answer is what the client reads.
func TestInterceptorServesPlainHTTPInsideTheTunnel(t *testing.T) {
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	seen := make(chan string, 1)
	ic := &Interceptor{Idle: time.Minute, Bufs: relay.NewBuffers(), Logger: zerolog.Nop(),
		Handle: func(req *http.Request, target Target) *http.Response {
			seen <- target.Addr() + " " + req.URL.String()
			return &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: 2,
				Body: io.NopCloser(strings.NewReader("ok"))}
		}}
	done := make(chan struct{})
	go func() {
		ic.Serve(Conn{Req: &http.Request{ProtoMajor: 1, ProtoMinor: 1}, Client: server,
			Target: Target{Host: "repo.test", Port: "8080"}, HandshakeTimeout: time.Second, Streams: 1})
		close(done)
	}()
	br := bufio.NewReader(client)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("CONNECT answer %q, %v", line, err)
	}
	_, _ = br.ReadString('\n') // the empty line
	go func() {
		_, _ = io.WriteString(client, "GET /m2/a.jar HTTP/1.1\r\nHost: repo.test:8080\r\nConnection: close\r\n\r\n")
	}()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("answer %d %q", resp.StatusCode, body)
	}
	if got := <-seen; got != "repo.test:8080 http://repo.test:8080/m2/a.jar" {
		t.Fatalf("handler saw %q", got)
	}
	client.Close()
	<-done
}
