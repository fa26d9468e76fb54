package main

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// TestSchedulerProcs runs the binary three ways and reads the processors
// its scheduler runs on from /metrics (docs/behaviour.md §2.2, procs): sized
// to the load, an idle proxy goes down to one; procs = 5 is five from the
// start; GOMAXPROCS in the environment is left as it is.
func TestSchedulerProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	clearNoraEnv(t)
	bin := filepath.Join(t.TempDir(), "nora-breaker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cases := []struct {
		name   string
		extra  string
		env    []string
		want   int
		logged string
	}{
		{"idle, sized to the load", "", nil, 1, ""},
		{"fixed by procs", "procs = 5\n", nil, 5, "scheduler processors fixed by sidecar.procs"},
		{"fixed by GOMAXPROCS", "", []string{"GOMAXPROCS=3"}, 3, "scheduler processors fixed by GOMAXPROCS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want == 1 && runtime.NumCPU() < 2 {
				t.Skip("one CPU: nothing to size")
			}
			dir := t.TempDir()
			conf := writeFile(t, "config.toml", "[sidecar]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n"+c.extra)
			addrFile := filepath.Join(dir, "addrs.json")
			var logs bytes.Buffer
			cmd := exec.Command(bin, "serve", "--config", conf, "--addr-file", addrFile)
			cmd.Env = append(withoutEnv(cmd.Environ(), "GOMAXPROCS"), c.env...)
			cmd.Stderr = &logs // read only after Wait returns
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			bound, err := listenaddr.WaitFile(addrFile, cmd.Process.Pid, 15*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var last int
			waitFor(t, "nora_sidecar_scheduler_procs "+strconv.Itoa(c.want), func() bool {
				last = schedulerProcs(t, bound["admin"])
				return last == c.want
			})
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("exit: %v\n%s", err, logs.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no exit after SIGTERM")
			}
			if c.logged != "" && !strings.Contains(logs.String(), c.logged) {
				t.Errorf("log does not say %q:\n%s", c.logged, logs.String())
			}
		})
	}
}

// schedulerProcs reads nora_sidecar_scheduler_procs from the admin
// listener's /metrics, or -1.
func schedulerProcs(t *testing.T, admin string) int {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "nora_sidecar_scheduler_procs "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// withoutEnv is env without the variable name.
func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
