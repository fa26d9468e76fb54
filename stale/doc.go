// Package stale keeps the on-disk stale cache: the last complete 200 answer
// to each cacheable GET, written while it streams to the client and committed
// with atomic renames, so that the proxy can still answer when every upstream
// that could serve a request has failed.
//
// The cache never stands between the client and its bytes: a write or commit
// problem is logged and counted, never returned to the reader. Everything on
// disk is treated as untrusted when the index is rebuilt at Open, because a
// crash, a full disk or an operator can leave anything behind.
package stale
