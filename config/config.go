// Package config loads NORA's config.toml and NORA_* environment the way NORA
// reads them, adds the proxy's own [sidecar] table, and turns the result into
// one validated Config: the circuit-breaker settings and the ordered table of
// upstreams every other package works from (docs/behaviour.md §2, §3).
//
// The files: load.go is the entry point (sources and precedence); tomldoc.go
// and env.go read typed values from the TOML document and the environment,
// remembering where each came from; formats.go, entries*.go and normalize.go
// build each format's upstream chain; breaker.go, sidecar*.go and
// validate_sidecar.go read and check the breaker and [sidecar] tables;
// errors.go collects problems; watch.go notices file changes for reloads.
package config
