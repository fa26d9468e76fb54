// Package stale keeps the on-disk stale cache: copies of the answers to
// cacheable requests, written while they stream to the client and committed
// with atomic renames, served when no upstream that could answer a request
// can (docs/behaviour.md §6).
package stale

// The cache never stands between the client and its bytes: a write or commit
// problem is logged and counted, never returned to the reader. Everything on
// disk is treated as untrusted when the index is rebuilt at Open, because a
// crash, a full disk or an operator can leave anything behind.
