package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ProbeOptions are the targets of `nora-breaker probe`, the chart's
// `helm test` hook.
type ProbeOptions struct {
	// Ready lists URLs that must answer 200 (an admin listener's /ready,
	// NORA's /ready); each is retried until Timeout.
	Ready []string
	// Proxy, when set, is a proxy listener that must answer a proxy request
	// in its own name.
	Proxy string
	// Timeout bounds the whole probe.
	Timeout time.Duration
	// Wait is how long to pause between tries of a Ready URL.
	Wait time.Duration
}

// probeTarget is the request sent through the proxy. Its Via already names
// nora-breaker, so the proxy answers it itself with 508 (its loop guard,
// the first check every request meets) and never dials anything: the probe
// works without egress, whatever the allow list, upstreams or breakers say.
const (
	probeTarget = "http://nora-breaker-probe.invalid/"
	probeVia    = "1.1 nora-breaker"
)

// Probe waits for every Ready URL to answer 200, then, with Proxy set, sends
// one request through the proxy and checks the proxy answered it itself.
// It prints one line per step and returns ExitOK or ExitRuntime.
func Probe(ctx context.Context, opts ProbeOptions, out, errOut io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	for _, u := range opts.Ready {
		if err := waitReady(ctx, u, opts.Wait); err != nil {
			fmt.Fprintf(errOut, "probe: %s: %v\n", u, err)
			return ExitRuntime
		}
		fmt.Fprintf(out, "ready: %s\n", u)
	}
	if opts.Proxy == "" {
		return ExitOK
	}
	if err := proxyAnswers(ctx, opts.Proxy); err != nil {
		fmt.Fprintf(errOut, "probe: proxy %s: %v\n", opts.Proxy, err)
		return ExitRuntime
	}
	fmt.Fprintf(out, "proxy %s answered a proxy request itself\n", opts.Proxy)
	return ExitOK
}

// waitReady polls u until it answers 200 or ctx ends, and then says what
// the last try got. A try the deadline cut short says only that time ran
// out; the answer before it (a 503, a refused connection) is what an
// operator needs, and is what is said when there was one.
func waitReady(ctx context.Context, u string, wait time.Duration) error {
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	var last error
	for {
		err := getOK(ctx, client, u)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", last)
		case <-time.After(wait):
		}
	}
}

func getOK(ctx context.Context, client *http.Client, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// proxyAnswers sends the probe request through proxy and checks that the
// answer is the proxy's own 508, not something else's on that address.
func proxyAnswers(ctx context.Context, proxy string) error {
	pu, err := url.Parse(proxy)
	if err != nil || pu.Host == "" {
		return errors.New("want a proxy URL such as http://host:3128")
	}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probeTarget, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Via", probeVia)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusLoopDetected || !strings.HasPrefix(string(body), "nora-breaker: ") {
		return fmt.Errorf("answered %d %q, want nora-breaker's own 508", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}
