package proxy

import (
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// failingAccepts is a listener whose first Accepts fail as a process out
// of file descriptors sees them fail.
type failingAccepts struct {
	net.Listener
	left atomic.Int32
}

func (l *failingAccepts) Accept() (net.Conn, error) {
	if l.left.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestFailedAcceptsAreSaid: a proxy port whose accepts fail (out of file
// descriptors) says so in a warning and in the local faults counter, and
// serves again once they succeed. net/http retries a failed accept and
// logs it only through the server's error log, which goes out at debug
// level: on main an operator at info saw nothing while clients were
// refused.
func TestFailedAcceptsAreSaid(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("pom")) })
	cfg := testkit.LoadConfig(t, ixMaven(up.URL, true, ""), nil)
	logs := &testkit.SyncBuffer{}
	tp := startProxyWrapped(t, cfg, zerolog.New(logs), func(ln net.Listener) net.Listener {
		f := &failingAccepts{Listener: ln}
		f.left.Store(3)
		return f
	})
	c := proxyClient(t, tp, nil)
	if resp, body := request(t, c, http.MethodGet, up.URL+"/maven2/g/a/1/a-1.pom", nil); resp.StatusCode != 200 || body != "pom" {
		t.Fatalf("after the failed accepts: %d %q", resp.StatusCode, body)
	}
	var warned int
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "accepting a client connection failed") &&
			strings.Contains(l, "too many open files") {
			warned++
		}
	}
	if warned != 3 {
		t.Errorf("%d warnings of a failed accept, want 3:\n%s", warned, logs.String())
	}
	if n := localFaults(t, tp); n != 3 {
		t.Errorf("nora_sidecar_local_faults_total = %v, want 3", n)
	}
}

// localFaults is nora_sidecar_local_faults_total.
func localFaults(t *testing.T, tp *testProxy) float64 {
	t.Helper()
	mfs, err := tp.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "nora_sidecar_local_faults_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
