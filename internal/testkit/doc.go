// Package testkit is the one set of helpers the project's tests share: a
// configuration loaded from TOML text, a log buffer safe for many
// goroutines, and polling for a condition with a deadline.
package testkit
