package cli

import (
	"strings"
	"testing"
	"time"
)

func TestParseSleep(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want time.Duration
		err  string
	}{
		{"5", 5 * time.Second, ""},
		{"0", 0, ""},
		{"1500ms", 1500 * time.Millisecond, ""},
		{"3600", time.Hour, ""},
		{"3601", 0, "outside 0 to 3600"},
		{"-1", 0, "outside"},
		{"99999999999999999999", 0, "neither"},
		{"2h", 0, "outside 0s to 1h0m0s"},
		{"-1s", 0, "outside"},
		{"five", 0, `"five" is neither whole seconds nor a duration`},
		{"", 0, "neither"},
	} {
		got, err := ParseSleep(tc.arg)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseSleep(%q) = %v, %v; want %v", tc.arg, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseSleep(%q) = %v, %v; want an error containing %q", tc.arg, got, err, tc.err)
		}
	}
}
