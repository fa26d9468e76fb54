// Package fallback decides what a client gets when the upstream it addressed
// cannot serve: the next upstream of the same format, a stale copy, or a
// synthesized answer.
package fallback
