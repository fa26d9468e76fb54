package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Error is one problem found while loading the configuration. Load returns
// every problem at once, joined with errors.Join, so an operator fixes a
// broken config in one pass instead of one restart per mistake.
type Error struct {
	// Source is "file <path>", "env" or "flag".
	Source string
	// Key is the TOML key path (circuit_breaker.failure_threshold), the
	// environment variable (NORA_CB_THRESHOLD) or the flag (--listen).
	Key string
	// Value is the offending value for env and flag problems, already
	// redacted when it may carry credentials. TOML problems leave it empty
	// because the line number already points at it.
	Value string
	// Line is the 1-based line in the TOML file, or 0 when unknown.
	Line int
	// Problem says what is wrong, in a few words.
	Problem string
}

// Error renders the problem the way an operator reads it, e.g.
// `config.toml:12: circuit_breaker.failure_threshold: must be >= 1 (got 0)`
// or `env NORA_CB_THRESHOLD="five": not an integer`.
func (e *Error) Error() string {
	var b strings.Builder
	if file, ok := strings.CutPrefix(e.Source, "file "); ok {
		b.WriteString(file)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		if e.Key != "" {
			b.WriteString(": " + e.Key)
		}
	} else {
		b.WriteString(e.Source)
		if e.Key != "" {
			b.WriteString(" " + e.Key + "=" + strconv.Quote(e.Value))
		}
	}
	b.WriteString(": " + e.Problem)
	return b.String()
}

// problems collects every *Error found during one Load.
type problems struct {
	list []error
}

func (p *problems) add(e *Error) { p.list = append(p.list, e) }

// envf records a problem with an environment variable's value.
func (p *problems) envf(name, value, format string, args ...any) {
	p.add(&Error{Source: "env", Key: name, Value: value, Problem: fmt.Sprintf(format, args...)})
}

func (p *problems) err() error { return errors.Join(p.list...) }

// origin remembers where a value came from so that a problem found later
// (a bad URL, a duplicate key) can still name its source, key and line.
type origin struct {
	source string // "file <path>", "env" or "default"
	key    string
	value  string // env only; redacted
	line   int
}

func (o origin) errorf(format string, args ...any) *Error {
	return &Error{Source: o.source, Key: o.key, Value: o.value, Line: o.line, Problem: fmt.Sprintf(format, args...)}
}

// redactURL hides any user:pass@ in a URL-ish string without requiring it to
// parse, because the strings we complain about are exactly the ones that do
// not parse and they must never leak credentials into logs. Everything up to
// the last "@" is hidden, not only what a parser would call the user info: a
// password pasted with an unencoded "/", "?" or "#" in it ends the authority
// early for a parser, and its tail would be shown (docs/behaviour.md §9). A
// path holding "@" is hidden too; a message that says too little is the
// safe side.
func redactURL(s string) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	}
	if at := strings.LastIndex(s[start:], "@"); at >= 0 {
		return s[:start] + "***@" + s[start+at+1:]
	}
	return s
}

// redactEntry hides the credential part of an env list entry such as
// `url|user:pass|prefix` or `name=url|auth`.
func redactEntry(s string) string {
	parts := strings.SplitN(s, "|", 3)
	parts[0] = redactURL(parts[0])
	if len(parts) > 1 && parts[1] != "" {
		parts[1] = "***"
	}
	return strings.Join(parts, "|")
}
