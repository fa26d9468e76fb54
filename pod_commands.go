package main

// The subcommands the Helm chart's pods run besides serve: sleep, the
// standalone Deployment's preStop hook, and probe, its `helm test` hook.

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nora-breaker/nora-breaker/cli"
)

// sleepCommand waits, then exits 0: the standalone chart's preStop hook,
// which keeps a terminating pod serving while its endpoint is withdrawn.
// The image has no shell and no sleep binary, and an exec hook works on
// every Kubernetes version (the native sleep action needs 1.30).
func sleepCommand(args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintf(stderr, "usage: nora-breaker sleep SECONDS\n")
		return cli.ExitUsage
	}
	d, err := cli.ParseSleep(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "sleep: %v\n", err)
		return cli.ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return cli.ExitOK
}

// probeCommand is the Helm chart's `helm test` hook: each --ready URL must
// answer 200, then the --proxy listener must answer a proxy request itself
// (cli.Probe). It runs in the proxy's own image, so the test needs no
// second image and runs under the same restricted security context.
func probeCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("probe", stderr)
	var ready urlList
	fs.Var(&ready, "ready", "URL that must answer 200 (repeatable)")
	proxyURL := fs.String("proxy", "", "proxy listener that must answer a proxy request, e.g. http://svc:3128")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	if fs.Parse(args) != nil || fs.NArg() > 0 || (len(ready) == 0 && *proxyURL == "") || *timeout <= 0 {
		fmt.Fprintf(stderr, "usage: nora-breaker probe [--ready URL]... [--proxy URL] [--timeout D]\n")
		return cli.ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return cli.Probe(ctx, cli.ProbeOptions{Ready: ready, Proxy: *proxyURL, Timeout: *timeout, Wait: time.Second}, stdout, stderr)
}

// urlList is a repeatable string flag.
type urlList []string

func (l *urlList) String() string     { return strings.Join(*l, ",") }
func (l *urlList) Set(v string) error { *l = append(*l, v); return nil }
