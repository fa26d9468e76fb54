package attempt

import (
	"bufio"
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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// TestProxyPauseIsNotUpstreamSilence: the proxy's process is stopped
// (SIGSTOP, a long GC pause, a starved CPU) while an attempt waits for
// headers, for longer than the header wait; the upstream answers at once,
// while the proxy is stopped, so its headers wait in the socket's buffer.
// When the process runs again the header timer is overdue, but the
// upstream was not silent: the proxy was, and the attempt must take the
// answer rather than blame the upstream with ErrHeaderTimeout (every
// attempt in flight would fail at once on resume and open the busiest
// breakers). The attempts run in a child process of this test binary,
// which the test stops and continues; the upstream is the parent's, on
// 127.0.0.1.
func TestProxyPauseIsNotUpstreamSilence(t *testing.T) {
	if url := os.Getenv("NB_PAUSE_CHILD_UPSTREAM"); url != "" {
		pauseChild(url, headerAttempt)
		return
	}
	runPaused(t, "TestProxyPauseIsNotUpstreamSilence", func(w http.ResponseWriter, answer <-chan struct{}) {
		<-answer
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "ok")
	})
}

// TestProxyPauseIsNotABodyStall: the same pause while the attempts wait
// for the rest of a body (the read timeout, 1 s), which the upstream sends
// while the proxy is stopped: the bodies are whole, not stalled.
func TestProxyPauseIsNotABodyStall(t *testing.T) {
	if url := os.Getenv("NB_PAUSE_CHILD_UPSTREAM"); url != "" {
		pauseChild(url, bodyAttempt)
		return
	}
	runPaused(t, "TestProxyPauseIsNotABodyStall", func(w http.ResponseWriter, answer <-chan struct{}) {
		w.Header().Set("Content-Length", "2")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "o")
		w.(http.Flusher).Flush()
		<-answer
		io.WriteString(w, "k")
	})
}

// runPaused starts the child process of test against an upstream whose
// handler is answer, stops the child once each of its pauseAttempts
// attempts reached the upstream and said it waits, releases the handlers,
// keeps the child stopped for three times its timeouts, continues it and
// checks that every attempt was answered.
func runPaused(t *testing.T, test string, handler func(w http.ResponseWriter, answer <-chan struct{})) {
	arrived, answer := make(chan struct{}, pauseAttempts), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		handler(w, answer)
	}))
	t.Cleanup(up.Close)
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), "NB_PAUSE_CHILD_UPSTREAM="+up.URL)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, pauseAttempts)
	var mu sync.Mutex
	var out strings.Builder
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if sc.Text() == "WAITING" {
				waiting <- struct{}{}
			}
		}
	}()
	fail := func(format string, args ...any) {
		cmd.Process.Kill()
		<-read
		cmd.Wait()
		t.Fatalf(format+"\n%s%s", append(args, out.String(), stderr.String())...)
	}
	for _, ch := range []chan struct{}{arrived, waiting} {
		for range pauseAttempts {
			select {
			case <-ch:
			case <-time.After(20 * time.Second):
				fail("the child's attempts did not all start")
			}
		}
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, cmd.Process.Pid)
	close(answer)
	// The pause itself: three times the child's timeouts, with every
	// answer sent meanwhile.
	<-time.After(3 * time.Second)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	<-read
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s%s", err, out.String(), stderr.String())
	}
	if n := strings.Count(out.String(), "RESULT answered"); n != pauseAttempts {
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

// pauseChild makes pauseAttempts attempts at url at once and prints what
// came of each.
func pauseChild(url string, attempt func(rt http.RoundTripper, s *Sender, url string) string) {
	rt := &http.Transport{MaxConnsPerHost: pauseAttempts}
	s, err := NewSender(time.Now, prometheus.NewRegistry())
	if err != nil {
		fmt.Println("RESULT", err)
		return
	}
	var wg sync.WaitGroup
	for range pauseAttempts {
		wg.Go(func() { fmt.Println("RESULT", attempt(rt, s, url)) })
	}
	wg.Wait()
}

// headerAttempt waits for headers for one second.
func headerAttempt(rt http.RoundTripper, _ *Sender, url string) string {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	fmt.Println("WAITING")
	resp, _, release, err := RoundTripWithin(rt, req, time.Second)
	if err != nil {
		return err.Error()
	}
	defer release(nil)
	resp.Body.Close()
	return fmt.Sprint("answered ", resp.StatusCode)
}

// bodyAttempt reads a body with a read timeout of one second, once its
// first byte is there.
func bodyAttempt(rt http.RoundTripper, s *Sender, url string) string {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := s.Send(rt, req, Target{Key: "up", HeaderTimeout: 10 * time.Second, ReadTimeout: time.Second},
		breakerstate.Ticket{})
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		return err.Error()
	}
	fmt.Println("WAITING")
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("answered %q", string(first)+string(rest))
}
