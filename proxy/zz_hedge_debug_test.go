package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func delayProxy(t *testing.T, target string, d time.Duration) string {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				u, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				go func() {
					buf := make([]byte, 32<<10)
					for {
						n, err := c.Read(buf)
						if n > 0 {
							time.Sleep(d)
							u.Write(buf[:n])
						}
						if err != nil {
							u.Close()
							return
						}
					}
				}()
				io.Copy(c, u)
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

func TestZZHedgeDebug(t *testing.T) {
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "a") })
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "b") })
	slow := delayProxy(t, a.Listener.Addr().String(), 3*time.Second)
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "maven"
[maven]
proxies = ["http://maven-a.test:8082", "http://maven-b.test:8083"]
proxy_timeout = 20
hedge_after = 0.5
[sidecar.resolve]
"maven-a.test:8082" = "%s"
"maven-b.test:8083" = "%s"
`, slow, b.Listener.Addr().String()), nil)
	c := proxyClient(t, tp, nil)
	for range 2 {
		req, _ := http.NewRequest("GET", "http://maven-a.test:8082/e2e/nora/hello/1.0/hello-1.0.jar", nil)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%q after %v", body, time.Since(start))
	}
}
