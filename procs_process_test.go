package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
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
	bin := buildBinary(t)
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
			conf := writeFile(t, "config.toml", "[sidecar]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n"+c.extra)
			srv := startServe(t, bin, conf, append(withoutEnv(os.Environ(), "GOMAXPROCS"), c.env...))
			waitFor(t, "nora_sidecar_scheduler_procs "+strconv.Itoa(c.want), func() bool {
				return metricValue(srv.bound["admin"], "nora_sidecar_scheduler_procs") == c.want
			})
			if logs := srv.stop(t); c.logged != "" && !strings.Contains(logs, c.logged) {
				t.Errorf("log does not say %q:\n%s", c.logged, logs)
			}
		})
	}
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
