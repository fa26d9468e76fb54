// Package cli holds the command-line subcommands that are not the server
// itself: check-config, status and ca init. Each writes to the writers it is
// given and returns an exit code, so tests can run them in-process.
package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/stale"
)

// Exit codes shared by every subcommand (docs/behaviour.md §8).
const (
	ExitOK      = 0
	ExitRuntime = 1
	ExitUsage   = 2
)

// CheckConfig prints the upstream table of a loaded configuration: one row
// per upstream with its breaker key, hosts, chain position and where its
// threshold and reset timeout came from. A stale_dir this process could not
// write is a configuration error here as it is for serve (docs/behaviour.md
// §6); one that does not exist yet is checked only as far as its nearest
// existing parent, since serve creates it.
func CheckConfig(cfg *config.Config, out io.Writer) int {
	src := cfg.Path
	if src == "" {
		src = "(no file: defaults and environment)"
	}
	fmt.Fprintf(out, "config: %s\n", src)
	fmt.Fprintf(out, "circuit breaker: enabled=%t failure_threshold=%d reset_timeout=%s\n",
		cfg.CircuitBreaker.Enabled, cfg.CircuitBreaker.FailureThreshold, cfg.CircuitBreaker.ResetTimeout)
	fmt.Fprintf(out, "listen: %s  admin: %s  interception: %s  stale cache: %s  shared state: %s\n\n",
		cfg.Sidecar.Listen, cfg.Sidecar.AdminListen, onOff(cfg.Sidecar.CACert != ""), orOff(cfg.Sidecar.StaleDir),
		orOff(cfg.Sidecar.SharedStateDisplay()))
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "FORMAT\tKEY\tURL\tHOSTS\tCHAIN\tBOUND\tTHRESHOLD\tRESET\tAUTH")
	for _, u := range cfg.Upstreams {
		bs := cfg.HostThresholds(u.Key, u)
		th, thFrom, rt, rtFrom := bs.FailureThreshold, bs.FailureThresholdFrom, bs.ResetTimeout, bs.ResetTimeoutFrom
		chain := cfg.Chain(u.Format)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%t\t%d (%s)\t%s (%s)\t%s\n",
			u.Format, u.Key, u.URL.Redacted(), strings.Join(u.Hosts, ","), u.Position+1, len(chain),
			u.Bound, th, thFrom, rt, rtFrom, authNote(u.Auth))
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
	printHostBreakers(cfg, out)
	if len(cfg.Warnings) > 0 {
		fmt.Fprintln(out)
		for _, w := range cfg.Warnings {
			fmt.Fprintf(out, "warning: %s\n", w)
		}
	}
	if err := stale.CheckDir(cfg.Sidecar.StaleDir); err != nil {
		fmt.Fprintf(out, "\nerror: stale_dir: %v (serve refuses to start with it)\n", err)
		return ExitUsage
	}
	return ExitOK
}

// printHostBreakers lists every breaker: one per host of each upstream (the
// URL host under the upstream's key, each alias under "<key>@<host>"), with
// its settings and where each came from.
func printHostBreakers(cfg *config.Config, out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "BREAKER\tHOST\tUPSTREAM\tTHRESHOLD\tRESET")
	for _, b := range cfg.HostBreakers() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d (%s)\t%s (%s)\n", b.Key, b.Host, b.Upstream.Key, b.FailureThreshold,
			b.FailureThresholdFrom, b.ResetTimeout, b.ResetTimeoutFrom)
	}
	_ = tw.Flush()
}

// authNote says whether credentials are configured without showing them.
func authNote(auth string) string {
	if auth == "" {
		return "-"
	}
	user, _, _ := strings.Cut(auth, ":")
	return "basic (" + user + ")"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off (tunnel only)"
}

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s
}
