package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

// breakerRow mirrors the fields of GET /breakers that status prints.
type breakerRow struct {
	Key            string   `json:"key"`
	Format         string   `json:"format"`
	State          string   `json:"state"`
	FailureCount   int      `json:"failure_count"`
	Threshold      int      `json:"threshold"`
	ResetTimeout   float64  `json:"reset_timeout_seconds"`
	LastFailureAgo *float64 `json:"last_failure_seconds_ago"`
	RetryAfter     int      `json:"retry_after_seconds"`
	Rejections     uint64   `json:"rejections"`
	Forced         string   `json:"forced"`
}

// Status fetches GET /breakers from a running proxy's admin listener and
// prints the breakers as a table.
func Status(adminURL string, out, errOut io.Writer) int {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Get(strings.TrimSuffix(adminURL, "/") + "/breakers")
	if err != nil {
		fmt.Fprintf(errOut, "status: %v\n", err)
		return ExitRuntime
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(errOut, "status: %s answered %s\n", adminURL, resp.Status)
		return ExitRuntime
	}
	var rows []breakerRow
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&rows); err != nil {
		fmt.Fprintf(errOut, "status: bad answer from %s: %v\n", adminURL, err)
		return ExitRuntime
	}
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tFORMAT\tSTATE\tFAILURES\tTHRESHOLD\tRESET\tLAST FAILURE\tRETRY AFTER\tREJECTIONS\tFORCED")
	for _, r := range rows {
		last := "-"
		if r.LastFailureAgo != nil {
			last = fmt.Sprintf("%.0fs ago", *r.LastFailureAgo)
		}
		forced := r.Forced
		if forced == "" {
			forced = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.0fs\t%s\t%ds\t%d\t%s\n", r.Key, r.Format, r.State,
			r.FailureCount, r.Threshold, r.ResetTimeout, last, r.RetryAfter, r.Rejections, forced)
	}
	_ = tw.Flush()
	return ExitOK
}
