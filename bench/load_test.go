package main

import "testing"

// TestDistinctURLs: each request of a distinct row gets a URL of its own,
// a query appended to the one it has; off, the URL is left as it is.
func TestDistinctURLs(t *testing.T) {
	on := &distinctURLs{base: "http://h/a.jar", on: true}
	if a, b := on.next(), on.next(); a != "http://h/a.jar?n=1" || b != "http://h/a.jar?n=2" {
		t.Errorf("got %q, %q", a, b)
	}
	q := &distinctURLs{base: "http://h/list?x=1", on: true}
	if got := q.next(); got != "http://h/list?x=1&n=1" {
		t.Errorf("with a query: %q", got)
	}
	off := &distinctURLs{base: "http://h/a.jar"}
	if a, b := off.next(), off.next(); a != off.base || b != off.base {
		t.Errorf("off: %q, %q", a, b)
	}
}
