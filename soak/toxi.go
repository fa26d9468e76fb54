package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// fault is what toxiproxy does to the primaries during one window.
type fault string

const (
	faultNone      fault = "healthy"
	faultRefused   fault = "refused"    // proxy disabled: connection refused
	faultBlackhole fault = "black-hole" // timeout toxic: bytes vanish, nothing answers
	faultReset     fault = "reset"      // reset_peer toxic: TCP RST
	faultSlow      fault = "slow"       // latency toxic, below proxy_timeout
)

// hard reports whether the fault makes every attempt fail (so the
// breakers must open); a slow upstream still answers in time.
func (f fault) hard() bool { return f == faultRefused || f == faultBlackhole || f == faultReset }

// toxi drives a toxiproxy server through its HTTP API.
type toxi struct {
	api    string // http://127.0.0.1:port
	client *http.Client
}

func (t *toxi) call(ctx context.Context, method, path string, body any, want int) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.api+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return fmt.Errorf("toxiproxy %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != want {
		return fmt.Errorf("toxiproxy %s %s: %d %s", method, path, resp.StatusCode, msg)
	}
	return nil
}

// waitReady polls the API until it answers.
func (t *toxi) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := t.call(ctx, http.MethodGet, "/version", nil, http.StatusOK); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// create adds a proxy listening on listen in front of upstream.
func (t *toxi) create(ctx context.Context, name, listen, upstream string) error {
	return t.call(ctx, http.MethodPost, "/proxies", map[string]any{
		"name": name, "listen": listen, "upstream": upstream, "enabled": true}, http.StatusCreated)
}

// apply puts proxy name into fault f, starting from healthy.
func (t *toxi) apply(ctx context.Context, name string, f fault) error {
	toxic := func(typ, stream string, attrs map[string]any) error {
		return t.call(ctx, http.MethodPost, "/proxies/"+name+"/toxics", map[string]any{
			"name": "soak", "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs},
			http.StatusOK)
	}
	switch f {
	case faultRefused:
		return t.call(ctx, http.MethodPost, "/proxies/"+name, map[string]any{"enabled": false}, http.StatusOK)
	case faultBlackhole:
		return toxic("timeout", "upstream", map[string]any{"timeout": 0})
	case faultReset:
		return toxic("reset_peer", "upstream", map[string]any{"timeout": 0})
	case faultSlow:
		return toxic("latency", "downstream", map[string]any{"latency": 300, "jitter": 50})
	}
	return nil
}

// heal undoes fault f on proxy name.
func (t *toxi) heal(ctx context.Context, name string, f fault) error {
	switch f {
	case faultRefused:
		return t.call(ctx, http.MethodPost, "/proxies/"+name, map[string]any{"enabled": true}, http.StatusOK)
	case faultBlackhole, faultReset, faultSlow:
		return t.call(ctx, http.MethodDelete, "/proxies/"+name+"/toxics/soak", nil, http.StatusNoContent)
	}
	return nil
}
