package main

import "testing"

// TestSleepCommand: the chart's preStop hook runs `nora-breaker sleep N`;
// a bad argument is a usage error, never a silent zero-second wait.
func TestSleepCommand(t *testing.T) {
	if code, _, errOut := runCLI(t, "sleep", "0"); code != 0 {
		t.Errorf("sleep 0: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{"sleep"}, {"sleep", "five"}, {"sleep", "1", "2"}, {"sleep", "-1"}} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestProbeCommandUsage: the probe needs something to check.
func TestProbeCommandUsage(t *testing.T) {
	for _, args := range [][]string{{"probe"}, {"probe", "extra"}, {"probe", "--proxy", "http://x", "--timeout", "0s"}} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
