// Package cli holds the command-line subcommands that are not the server
// itself (check-config, status, sleep) and the start-up checks that serve
// and check-config share. Each subcommand writes to the writers it is given
// and returns an exit code, so tests can run them in-process.
package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nora-breaker/nora-breaker/config"
)

// Exit codes shared by every subcommand (docs/behaviour.md §8).
const (
	ExitOK      = 0
	ExitRuntime = 1
	ExitUsage   = 2
)

// CheckOptions are check-config's choices.
type CheckOptions struct {
	// SkipFiles leaves out the start-up checks (StartupChecks) of the files
	// the configuration names, for a file checked away from where the proxy
	// runs (one rendered by helm template on a laptop).
	SkipFiles bool
	// Now is the clock the CA's validity is checked against.
	Now func() time.Time
}

// CheckConfig runs serve's start-up checks on a loaded configuration, then
// prints its upstream table: one row per upstream with its breaker key,
// hosts, chain position and where its threshold and reset timeout came
// from. A failed start-up check is reported on errOut with exit code 2,
// the code serve exits with for it.
func CheckConfig(cfg *config.Config, opts CheckOptions, out, errOut io.Writer) int {
	checks := "skipped (--skip-files)"
	if !opts.SkipFiles {
		if err := CheckStartup(cfg, opts.Now); err != nil {
			fmt.Fprintf(errOut, "the proxy would refuse to start:\n%v\n", err)
			return ExitUsage
		}
		checks = "ok"
	}
	src := cfg.Path
	if src == "" {
		src = "(no file: defaults and environment)"
	}
	fmt.Fprintf(out, "config: %s\n", src)
	fmt.Fprintf(out, "start-up checks of the files it names: %s\n", checks)
	fmt.Fprintf(out, "circuit breaker: enabled=%t failure_threshold=%d reset_timeout=%s\n",
		cfg.CircuitBreaker.Enabled, cfg.CircuitBreaker.FailureThreshold, cfg.CircuitBreaker.ResetTimeout)
	fmt.Fprintf(out, "listen: %s  admin: %s  interception: %s  stale cache: %s  shared state: %s\n\n",
		cfg.Sidecar.Listen, cfg.Sidecar.AdminListen, onOff(cfg.Sidecar.CACert != ""), orOff(cfg.Sidecar.StaleDir),
		orOff(cfg.Sidecar.SharedStateDisplay()))
	fmt.Fprintf(out, "parent proxy: %s  parent_no_proxy: %s\n\n", cfg.Sidecar.ParentDisplay(),
		orNone(strings.Join(cfg.Sidecar.ParentNoProxy, ", ")))
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "FORMAT\tKEY\tURL\tHOSTS\tCHAIN\tBOUND\tTHRESHOLD\tRESET\tHEDGE\tSUSPECT\tAUTH\tPARENT")
	for _, u := range cfg.Upstreams {
		bs := cfg.HostThresholds(u.Key, u)
		th, thFrom, rt, rtFrom := bs.FailureThreshold, bs.FailureThresholdFrom, bs.ResetTimeout, bs.ResetTimeoutFrom
		chain := cfg.Chain(u.Format)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%t\t%d (%s)\t%s (%s)\t%s (%s)\t%s (%s)\t%s\t%s\n",
			u.Format, u.Key, u.URL.Redacted(), strings.Join(u.Hosts, ","), u.Position+1, len(chain),
			u.Bound, th, thFrom, rt, rtFrom, offOr(bs.HedgeAfter), bs.HedgeAfterFrom, offOr(bs.SuspectAfter),
			bs.SuspectAfterFrom, authNote(u.Auth), parentNote(u.Parent))
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
	for _, p := range cfg.Parents() {
		bs := cfg.ParentThresholds(p)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d (%s)\t%s (%s)\n", p.Key(), p.URL.Host, "-", bs.FailureThreshold,
			bs.FailureThresholdFrom, bs.ResetTimeout, bs.ResetTimeoutFrom)
	}
	_ = tw.Flush()
}

// offOr shows a wait that 0 turns off.
func offOr(d time.Duration) string {
	if d <= 0 {
		return "off"
	}
	return d.String()
}

// authNote says whether credentials are configured without showing them.
func authNote(auth string) string {
	if auth == "" {
		return "-"
	}
	user, _, _ := strings.Cut(auth, ":")
	return "basic (" + user + ")"
}

// parentNote names the parent an upstream goes through, by its breaker key
// (which carries no credential), or "direct".
func parentNote(p *config.Parent) string {
	if p == nil {
		return "direct"
	}
	return p.Key()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
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
