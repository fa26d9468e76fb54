package main

import (
	"strings"
	"testing"
)

// TestCollapsingSquidConf: the section's squid may cache (squid collapses
// only requests for answers it may keep) and collapses, on its own port.
func TestCollapsingSquidConf(t *testing.T) {
	conf := collapsingSquidConf("/tmp/x", 4242)
	for _, want := range []string{"collapsed_forwarding on", "maximum_object_size_in_memory 64 MB", "http_port 127.0.0.1:4242"} {
		if !strings.Contains(conf, want) {
			t.Errorf("conf lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "cache deny all") {
		t.Errorf("conf still refuses to cache:\n%s", conf)
	}
}
