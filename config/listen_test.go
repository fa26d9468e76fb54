package config

import "testing"

// TestListenersCollide: the pairs of listen addresses the proxy could not
// bind together, and the ones it can.
func TestListenersCollide(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"0.0.0.0:3128", "0.0.0.0:3128", true},
		{"127.0.0.1:3128", "127.0.0.1:3128", true},
		{"LOCALHOST:3128", "localhost:3128", true},
		{":3128", "127.0.0.1:3128", true},
		{"127.0.0.1:3128", "0.0.0.0:3128", true},
		{"[::]:3128", "10.0.0.5:3128", true},
		{"0.0.0.0:3128", "0.0.0.0:9128", false},
		{"127.0.0.1:3128", "10.0.0.5:3128", false},
		{"127.0.0.1:0", "127.0.0.1:0", false},
		{"nope", "nope", false},
	} {
		if got := listenersCollide(tc.a, tc.b); got != tc.want {
			t.Errorf("listenersCollide(%q, %q) = %t, want %t", tc.a, tc.b, got, tc.want)
		}
	}
}
