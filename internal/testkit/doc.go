// Package testkit is what tests across the module share: a settable clock,
// scripted upstreams served over loopback or in memory, and configured
// upstreams built from a URL.
package testkit
