package npm

import (
	"net/http"
	"testing"
)

// TestSubstitutable: an npm request may be answered by another registry or
// a stale copy when it is a GET or HEAD that does not read for writing.
func TestSubstitutable(t *testing.T) {
	for _, c := range []struct {
		method, url string
		want        bool
	}{
		{http.MethodGet, "/left-pad", true},
		{http.MethodGet, "/@acme%2futil", true},
		{http.MethodGet, "/left-pad/-/left-pad-1.3.0.tgz", true},
		{http.MethodHead, "/left-pad", true},
		{http.MethodGet, "/left-pad?write=true", false},
		{http.MethodGet, "/@acme%2futil?write=true", false},
		{http.MethodPut, "/left-pad", false},
		{http.MethodPut, "/left-pad/-rev/7-a", false},
		{http.MethodDelete, "/left-pad/-rev/7-a", false},
	} {
		req, err := http.NewRequest(c.method, "https://registry.test"+c.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := (Format{}).Substitutable(req); got != c.want {
			t.Errorf("%s %s: substitutable %t, want %t", c.method, c.url, got, c.want)
		}
	}
}
