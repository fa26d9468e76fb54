// Package testkit is what tests across the module share: a settable clock,
// scripted upstreams served over loopback or in memory, configurations
// loaded from TOML text or built from a URL, a log buffer safe for many
// goroutines, and polling for a condition with a deadline.
package testkit
