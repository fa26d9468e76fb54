package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// metadataForms spell cloud metadata and link-local destinations in every
// form a client might send, as URL hosts (IPv6 in brackets, zones escaped).
func metadataForms() []string {
	return []string{
		"169.254.169.254",
		"169.254.169.254.",
		"169.254.10.1",
		"[fe80::1]",
		"[fe80::1%25eth0]",
		"[fd00:ec2::254]",
		"[fd00:ec2::254%25eth0]",
		"[fd20:ce::254]",
		"100.100.100.200",
		"[::ffff:169.254.169.254]",
		"[::ffff:a9fe:a9fe]",
		"[::a9fe:a9fe]",
		"[64:ff9b::a9fe:a9fe]",
		"[::ffff:6464:64c8]",
		"[64:ff9b::6464:64c8]",
		"0xa9fea9fe",
		"2852039166",
		"0251.0376.0251.0376",
		"0.0.0.0",
		"[::]",
	}
}

// canary is a loopback listener standing in for the metadata service: every
// form is mapped to it with [sidecar.resolve], so a request the policy let
// through would be dialed here, and the test sees it.
type canary struct {
	srv   *httptest.Server
	conns atomic.Int64
}

func newCanary(t *testing.T) *canary {
	c := &canary{}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "canary")
	}))
	c.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	c.srv.Start()
	t.Cleanup(c.srv.Close)
	return c
}

func (c *canary) addr() string { return c.srv.Listener.Addr().String() }

// dialKeys are the resolve-map keys the dialer may look a URL host up
// under: the host as the URL yields it and as a CONNECT line carries it.
func dialKeys(urlHost, port string) []string {
	raw := strings.TrimRight(strings.Trim(urlHost, "[]"), ".")
	unescaped := strings.ReplaceAll(raw, "%25", "%")
	return []string{net.JoinHostPort(strings.ToLower(raw), port), net.JoinHostPort(strings.ToLower(unescaped), port)}
}

// newCanaryProxy starts a proxy (no interception CA, so CONNECTs are
// tunnelled and dialed) whose resolve map sends every metadata form, and
// the control name canary.example, to the canary.
func newCanaryProxy(t *testing.T, c *canary) *testProxy {
	cfg := testkit.LoadConfig(t, ixMaven("http://registry.invalid", true, ""), nil)
	for _, h := range append([]string{"canary.example"}, metadataForms()...) {
		for _, port := range []string{"80", "443"} {
			for _, k := range dialKeys(h, port) {
				cfg.Sidecar.Resolve[k] = c.addr()
			}
		}
	}
	return startProxy(t, cfg)
}

// TestDestinationMetadataFormsRefusedBeforeDial: every spelling of a
// metadata address is answered 403, for a plain request and for a CONNECT,
// and nothing is dialed. The control name proves a dial would have shown.
func TestDestinationMetadataFormsRefusedBeforeDial(t *testing.T) {
	c := newCanary(t)
	tp := newCanaryProxy(t, c)

	resp := rawExchange(t, tp, "GET http://canary.example/x HTTP/1.1\r\nHost: canary.example\r\n\r\n")
	if resp == nil || resp.StatusCode != 200 || c.conns.Load() != 1 {
		t.Fatalf("control request: %v, canary saw %d connections; the canary setup is broken", resp, c.conns.Load())
	}

	for _, h := range metadataForms() {
		t.Run(h, func(t *testing.T) {
			c.conns.Store(0)
			get := fmt.Sprintf("GET http://%s/latest/meta-data/ HTTP/1.1\r\nHost: %s\r\n\r\n", h, h)
			if resp := rawExchange(t, tp, get); resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Errorf("GET: %v, want 403", statusOf(resp))
			}
			if resp, _, _ := ixRawConnect(t, tp, h+":443"); resp.StatusCode != http.StatusForbidden {
				t.Errorf("CONNECT: %v, want 403", resp.Status)
			}
			if n := c.conns.Load(); n != 0 {
				t.Fatalf("the canary saw %d connections: a refused form was dialed", n)
			}
		})
	}
}

// TestDestinationResolvedFormsRefused: a name whose resolved address is a
// metadata address in any IPv6 form is refused by the dialer, with 403.
func TestDestinationResolvedFormsRefused(t *testing.T) {
	targets := []string{"[64:ff9b::a9fe:a9fe]:80", "[::a9fe:a9fe]:80", "[fd20:ce::254]:80",
		"100.100.100.200:80", "[fe80::1]:80", "0.0.0.0:80", "[::]:80"}
	cfg := testkit.LoadConfig(t, ixMaven("http://registry.invalid", true, ""), nil)
	for i, to := range targets {
		cfg.Sidecar.Resolve[fmt.Sprintf("meta%d.example:80", i)] = to
	}
	tp := startProxy(t, cfg)
	for i, to := range targets {
		t.Run(to, func(t *testing.T) {
			host := fmt.Sprintf("meta%d.example", i)
			resp := rawExchange(t, tp, "GET http://"+host+"/x HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			if resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Fatalf("got %v, want 403", statusOf(resp))
			}
		})
	}
}

func statusOf(resp *http.Response) string {
	if resp == nil {
		return "no answer"
	}
	return resp.Status
}
