package main

import (
	"net/http"
	"testing"
)

func TestClassify(t *testing.T) {
	get := target{format: "maven", method: http.MethodGet, primary: "maven-a"}
	put := target{format: "maven", method: http.MethodPut, primary: "maven-a"}
	npm := target{format: "npm", method: http.MethodGet, primary: "npm-a"}
	sec := map[string]bool{"maven-b": true, "npm-b": true}
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	cases := []struct {
		name   string
		t      target
		status int
		hdr    http.Header
		want   string
	}{
		{"primary's own answer", get, 200, h(originHeader, "maven-a"), classUpstream},
		{"primary's 404", get, 404, h(originHeader, "maven-a"), classUpstream},
		{"fallback from the secondary", get, 200, h(originHeader, "maven-b", "X-Nora-Upstream", "maven:b"), classFallback},
		{"fallback claiming the primary", get, 200, h(originHeader, "maven-a", "X-Nora-Upstream", "maven:a"), classViolation},
		{"secondary without the header", get, 200, h(originHeader, "maven-b"), classViolation},
		{"stale copy", get, 200, h("X-Nora-Stale", "true", originHeader, "maven-a"), classStale},
		{"synthesized 503", put, 503, h("X-Nora-Breaker-Key", "maven:a", "Retry-After", "2"), classSynth503},
		{"503 without Retry-After", put, 503, h("X-Nora-Breaker-Key", "maven:a"), classViolation},
		{"synthesized maven 404", get, 404, h(), classSynth404},
		{"npm 404 without origin", npm, 404, h(), classViolation},
		{"502 for a PUT", put, 502, h("X-Nora-Breaker-Key", "maven:a"), classGateway},
		{"504 for a GET", get, 504, h("X-Nora-Breaker-Key", "maven:a"), classViolation},
		{"500", get, 500, h(), classViolation},
		{"200 with no origin", get, 200, h(), classViolation},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, why := classify(tc.t, &http.Response{StatusCode: tc.status, Header: tc.hdr}, sec)
			if got != tc.want {
				t.Fatalf("classify = %s (%s), want %s", got, why, tc.want)
			}
		})
	}
}
