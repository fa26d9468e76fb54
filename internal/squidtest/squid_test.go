package squidtest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestSquidAsksForCredentialsAndResolvesItsHosts: squid answers 407
// without the account's credentials, forwards with them to a name from its
// hosts file, and refuses connections once stopped.
func TestSquidAsksForCredentialsAndResolvesItsHosts(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.Host)
	}))
	t.Cleanup(up.Close)
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	s := Start(t, Options{Users: map[string]string{"bot": "s3cret"}, Hosts: map[string]string{"registry.test": "127.0.0.1"}})
	get := func(user *url.Userinfo) (int, string) {
		proxy, _ := url.Parse(s.URL)
		proxy.User = user
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
		resp, err := c.Get("http://registry.test:" + port + "/x")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(nil); code != http.StatusProxyAuthRequired {
		t.Fatalf("without credentials: %d, want 407", code)
	}
	if code, body := get(url.UserPassword("bot", "s3cret")); code != 200 || body != "hello registry.test:"+port {
		t.Fatalf("with credentials: %d %q\n%s", code, body, s.Logs())
	}
	// squid writes a line when the transaction ends, which can be just
	// after the client has the answer.
	if !testkit.Poll(10*time.Second, func() bool { return strings.Contains(s.AccessLog(), " bot ") }) {
		t.Fatalf("the access log names no user:\n%s", s.AccessLog())
	}
	s.Stop()
	if c, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a stopped squid still accepts connections")
	}
}
