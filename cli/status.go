package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/adminapi"
)

// StatusOptions configures Status. Zero values are noted per field.
type StatusOptions struct {
	// Admin is the admin listener's base URL, e.g. http://127.0.0.1:9128.
	Admin string
	// Token is sent as "Authorization: Bearer <Token>" when not empty
	// (docs/behaviour.md §2.2 admin_token); see AdminToken for where it comes from.
	Token string
	// Watch redraws the screen on every tick until ctx ends.
	Watch bool
	// Ticks paces the redraws; nil means once a second.
	Ticks <-chan time.Time
	// Transitions is how many of the latest transitions are listed; 0 means 10.
	Transitions int
	// Client makes the admin calls; nil means a 5 s client that never uses
	// the environment's proxy.
	Client *http.Client
}

// clearScreen moves the cursor home and clears the terminal (ANSI), so each
// --watch frame replaces the last.
const clearScreen = "\x1b[H\x1b[2J"

// Status prints the breakers of a running proxy, grouped per format and
// upstream, followed by the latest transitions. With Watch it redraws until
// ctx ends (Ctrl-C) and returns ExitOK; a failed fetch is shown in the frame
// and retried at the next tick. Without it a failed fetch is ExitRuntime.
func Status(ctx context.Context, o StatusOptions, out, errOut io.Writer) int {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	}
	if o.Transitions == 0 {
		o.Transitions = 10
	}
	if !o.Watch {
		if err := drawStatus(ctx, o, out); err != nil {
			fmt.Fprintf(errOut, "status: %v\n", err)
			return ExitRuntime
		}
		return ExitOK
	}
	ticks := o.Ticks
	if ticks == nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		ticks = t.C
	}
	for {
		var frame strings.Builder
		frame.WriteString(clearScreen)
		fmt.Fprintf(&frame, "nora-breaker status of %s at %s (Ctrl-C to stop)\n\n", o.Admin,
			time.Now().Format("15:04:05"))
		if err := drawStatus(ctx, o, &frame); err != nil {
			if ctx.Err() != nil {
				return ExitOK // interrupted mid-fetch: keep the last whole frame on screen
			}
			fmt.Fprintf(&frame, "status: %v\n", err)
		}
		_, _ = io.WriteString(out, frame.String())
		select {
		case <-ctx.Done():
			return ExitOK
		case <-ticks:
		}
	}
}

// drawStatus fetches the breakers and the history once and prints them.
func drawStatus(ctx context.Context, o StatusOptions, out io.Writer) error {
	var rows []adminapi.Breaker
	if err := getJSON(ctx, o, "/breakers", &rows); err != nil {
		return err
	}
	printBreakers(out, groupRows(rows))
	var hist []adminapi.Transition
	switch err := getJSON(ctx, o, "/breakers/history", &hist); {
	case errors.Is(err, errNotFound):
		return nil // a proxy older than the history endpoint
	case err != nil:
		return err
	}
	printTransitions(out, hist, o.Transitions)
	return nil
}

// errNotFound is an admin endpoint the proxy does not have.
var errNotFound = errors.New("not found")

// getJSON fetches one admin endpoint and decodes its JSON answer.
func getJSON(ctx context.Context, o StatusOptions, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(o.Admin, "/")+path, nil)
	if err != nil {
		return err
	}
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s%s: %w", o.Admin, path, errNotFound)
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%s answered %s: pass the admin token (--token, $%s or --token-file)",
			o.Admin, resp.Status, TokenEnv)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s answered %s", o.Admin, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(into); err != nil {
		return fmt.Errorf("bad answer from %s%s: %w", o.Admin, path, err)
	}
	return nil
}

// groupRows orders rows per format, then per upstream (an upstream's own
// key and its alias hosts' keys together), keeping the proxy's
// configuration order within each group.
func groupRows(rows []adminapi.Breaker) []adminapi.Breaker {
	var formats []string
	upstreams := map[string][]string{} // format → its upstreams, in order
	members := map[string][]adminapi.Breaker{}
	for _, r := range rows {
		up := r.Upstream
		if up == "" {
			up = r.Key
		}
		if _, ok := upstreams[r.Format]; !ok {
			formats = append(formats, r.Format)
			upstreams[r.Format] = nil
		}
		if _, ok := members[up]; !ok {
			upstreams[r.Format] = append(upstreams[r.Format], up)
		}
		members[up] = append(members[up], r)
	}
	out := make([]adminapi.Breaker, 0, len(rows))
	for _, f := range formats {
		for _, up := range upstreams[f] {
			out = append(out, members[up]...)
		}
	}
	return out
}

// printBreakers prints one table row per breaker.
func printBreakers(out io.Writer, rows []adminapi.Breaker) {
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "FORMAT\tKEY\tHOST\tSTATE\tFAILURES\tRESET\tLAST FAILURE\tRETRY AFTER\tREJECTIONS\tTHROTTLED\tFORCED")
	for _, r := range rows {
		last := "-"
		if r.LastFailureAgo != nil {
			last = fmt.Sprintf("%.0fs ago", *r.LastFailureAgo)
		}
		throttled := "-"
		if r.Throttled {
			throttled = fmt.Sprintf("%ds left", r.ThrottledSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%ds\t%d\t%s\t%s\n", r.Format, r.Key, dash(r.Host),
			r.State, r.FailureCount, r.Threshold, openTime(r), last, r.RetryAfter, r.Rejections, throttled,
			dash(r.Forced))
	}
	_ = tw.Flush()
}

// openTime is the RESET cell: reset_timeout, or while open the current
// open time, with the failed probes that grew it (docs/behaviour.md §4).
func openTime(r adminapi.Breaker) string {
	d := r.ResetTimeout
	if r.State == "open" || r.State == "half_open" {
		d = r.OpenTime
	}
	if r.FailedProbes > 0 {
		return fmt.Sprintf("%.0fs (%d failed probes)", d, r.FailedProbes)
	}
	return fmt.Sprintf("%.0fs", d)
}

// printTransitions prints the latest n transitions, newest first.
func printTransitions(out io.Writer, hist []adminapi.Transition, n int) {
	fmt.Fprintf(out, "\nLAST TRANSITIONS (newest first, %d of %d kept)\n", min(n, len(hist)), len(hist))
	if len(hist) == 0 {
		fmt.Fprintln(out, "none since start")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME (UTC)\tKEY\tFROM → TO\tWHY\tFAILURES")
	for _, h := range hist[:min(n, len(hist))] {
		fmt.Fprintf(tw, "%s\t%s\t%s → %s\t%s\t%d\n", h.At.UTC().Format("2006-01-02 15:04:05"), h.Key, h.From, h.To,
			h.Why, h.FailureCount)
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
