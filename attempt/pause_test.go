package attempt

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestProxyPauseIsNotUpstreamSilence: the proxy's process is stopped
// (SIGSTOP, a long GC pause, a starved CPU) while an attempt waits for
// headers, for longer than the header wait; the upstream answers at once,
// while the proxy is stopped, so its headers wait in the socket's buffer.
// When the process runs again the header timer is overdue, but the
// upstream was not silent: the proxy was, and the attempt must take the
// answer rather than blame the upstream with ErrHeaderTimeout (every
// attempt in flight would fail at once on resume and open the busiest
// breakers). The attempt runs in a child process of this test binary,
// which the test stops and continues; the upstream is the parent's, on
// 127.0.0.1.
func TestProxyPauseIsNotUpstreamSilence(t *testing.T) {
	if url := os.Getenv("NB_PAUSE_CHILD_UPSTREAM"); url != "" {
		pauseChild(url)
		return
	}
	arrived, answer := make(chan struct{}, pauseAttempts), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-answer
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	var out bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestProxyPauseIsNotUpstreamSilence$")
	cmd.Env = append(os.Environ(), "NB_PAUSE_CHILD_UPSTREAM="+up.URL)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for range pauseAttempts {
		select {
		case <-arrived:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("the child's requests never arrived:\n%s", out.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, cmd.Process.Pid)
	close(answer)
	// The pause itself: three times the child's header wait, with the
	// answer already sent.
	<-time.After(3 * time.Second)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	if n := strings.Count(out.String(), "RESULT answered 200"); n != pauseAttempts {
		t.Fatalf("after a pause of the proxy's own, %d of %d attempts were answered:\n%s", n, pauseAttempts, out.String())
	}
}

// waitStopped polls until the process pid is stopped (state T in
// /proc/pid/stat), with a deadline.
func waitStopped(t *testing.T, pid int) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'T' {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the child did not stop")
}

// pauseAttempts is how many attempts the child has waiting when it is
// stopped: on resume each is a race between its overdue timer and its
// answer, which one attempt alone loses only about half of the time.
const pauseAttempts = 32

// pauseChild makes pauseAttempts attempts at url at once, each with a
// header wait of one second, and prints what came of each.
func pauseChild(url string) {
	rt := &http.Transport{MaxConnsPerHost: pauseAttempts}
	var wg sync.WaitGroup
	for range pauseAttempts {
		wg.Go(func() { fmt.Println("RESULT", pauseAttempt(rt, url)) })
	}
	wg.Wait()
}

func pauseAttempt(rt http.RoundTripper, url string) string {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, _, release, err := RoundTripWithin(rt, req, time.Second)
	if err != nil {
		return err.Error()
	}
	defer release(nil)
	resp.Body.Close()
	return fmt.Sprint("answered ", resp.StatusCode)
}
