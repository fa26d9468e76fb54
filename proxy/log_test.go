package proxy

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// ixRequestLines returns the parsed "request" lines of a log.
func ixRequestLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if m["message"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

func TestLogOneLinePerRequestWithoutSecrets(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("artifact"))
	})
	tp, logs := ixStartProxy(t, ixMaven(up.URL, true, ""))
	host := strings.TrimPrefix(up.URL, "http://")
	secrets := []string{"s3cret-bearer-7f1", "s3cret-cookie-9a2", "s3cret-urlpass-4c3", "s3cret-token-5d4",
		"czNjcmV0LWJhc2lj"}
	resp, body := ixRaw(t, tp, "GET http://alice:"+secrets[2]+"@"+host+"/maven2/g/a.jar?token="+secrets[3]+
		"&q=keep HTTP/1.1\r\nHost: "+host+"\r\nAuthorization: Bearer "+secrets[0]+"\r\nCookie: session="+secrets[1]+
		"\r\nProxy-Authorization: Basic "+secrets[4]+"\r\n\r\n")
	if resp.StatusCode != 200 || body != "artifact" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	request(t, proxyClient(t, tp, nil), "HEAD", up.URL+"/maven2/g/a.pom?X-Amz-Signature="+secrets[3], nil)
	text := logs.waitForN(t, `"message":"request"`, 2)
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("secret %q logged:\n%s", s, text)
		}
	}
	lines := ixRequestLines(t, text)
	if len(lines) != 2 {
		t.Fatalf("%d request lines, want 2:\n%s", len(lines), text)
	}
	get := lines[0]
	if get["method"] != "GET" {
		get = lines[1]
	}
	want := map[string]any{"method": "GET", "scheme": "http", "host": host, "path": "/maven2/g/a.jar",
		"format": "maven", "key": ixKey(up.URL), "result": "forwarded", "status": float64(200),
		"bytes": float64(len("artifact")), "query": "token=REDACTED&q=keep",
		"served_by": ixKey(up.URL), "level": "info"}
	for k, v := range want {
		if get[k] != v {
			t.Errorf("%s = %v, want %v", k, get[k], v)
		}
	}
	// One attempt, whose body (8 bytes to come) had the last word.
	attempts := []any{map[string]any{"key": ixKey(up.URL), "verdict": "success", "pending": true,
		"status": float64(200)}}
	if !reflect.DeepEqual(get["attempts"], attempts) {
		t.Errorf("attempts = %v, want %v", get["attempts"], attempts)
	}
	if _, ok := get["duration_ms"].(float64); !ok {
		t.Errorf("duration_ms missing: %v", get)
	}
}

func TestLogBreakerTransitions(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	tp, logs := ixStartProxy(t, ixMaven(up.URL, true, ""))
	c := proxyClient(t, tp, nil)
	for i := 0; i < 3; i++ {
		request(t, c, "POST", up.URL+"/maven2/x", nil)
	}
	resp, _ := request(t, c, "POST", up.URL+"/maven2/x", nil)
	ixWant503(t, resp, ixKey(up.URL), "open", "10")
	tp.Clock.Advance(10 * time.Second)
	request(t, c, "GET", up.URL+"/maven2/x", nil) // the probe succeeds
	text := logs.waitFor(t, `"to":"closed"`)
	levels := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var m map[string]any
		json.Unmarshal([]byte(line), &m)
		if m["message"] == "circuit breaker transition" {
			if m["key"] != ixKey(up.URL) {
				t.Errorf("transition for key %v", m["key"])
			}
			levels[m["to"].(string)] = m["level"].(string)
		}
	}
	if levels["open"] != "warn" || levels["half_open"] != "info" || levels["closed"] != "info" {
		t.Fatalf("transition levels %v, want open=warn half_open=info closed=info", levels)
	}
	// The rejected request is logged too, at warn as a 5xx answer.
	logs.waitFor(t, `"result":"synthesized_503"`)
}

// TestLogNoSecretsOnFailurePaths: failed dials, fallback attempts and
// synthesized answers are logged (debug included) without credentials.
func TestLogNoSecretsOnFailurePaths(t *testing.T) {
	dead := "http://" + closedPort(t)
	// Every refusal in full: the GET's and the POST's 503 are of one key.
	tp, logs := ixStartProxy(t, ixTwoMaven(dead, "http://"+closedPort(t), "[sidecar]\nlog_refusals = \"every\"\n"))
	c := proxyClient(t, tp, nil)
	secrets := []string{"s3cret-bearer-a1", "s3cret-cookie-b2", "s3cret-token-c3"}
	hdr := http.Header{"Authorization": {"Bearer " + secrets[0]}, "Cookie": {"sid=" + secrets[1]}}
	for i := 0; i < 4; i++ { // the last one is rejected by the open breaker
		request(t, c, "GET", dead+"/m2/a.jar?access_token="+secrets[2], hdr)
	}
	request(t, c, "POST", dead+"/m2/a.jar?token="+secrets[2], hdr)
	text := logs.waitForN(t, `"message":"request"`, 5)
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("secret %q logged:\n%s", s, text)
		}
	}
	if n := len(ixRequestLines(t, text)); n != 5 {
		t.Errorf("%d request lines, want 5", n)
	}
}
