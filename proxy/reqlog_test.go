package proxy

import "testing"

// TestRedactQuery: only the values of the kept parameters are logged; a
// name that is a bad escape is no kept name (issue 20, point 11).
func TestRedactQuery(t *testing.T) {
	for raw, want := range map[string]string{
		"":                                    "",
		"scope=repository:a:pull&service=hub": "scope=repository:a:pull&service=hub",
		"X-Amz-Signature=abc&q=lodash":        "X-Amz-Signature=REDACTED&q=lodash",
		"%zz=s3cr3t":                          "%zz=REDACTED",
		"%73cope=x":                           "%73cope=x", // "scope", escaped: still a kept name
		"token":                               "token",     // no value to hide
		"a=1&&b=2":                            "a=REDACTED&&b=REDACTED",
	} {
		if got := redactQuery(raw); got != want {
			t.Errorf("redactQuery(%q) = %q, want %q", raw, got, want)
		}
	}
}
