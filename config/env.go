package config

import (
	"strconv"
	"strings"
)

// env reads NORA_* variables through an injected lookup so tests never touch
// the process environment, and records a problem for every bad value.
type env struct {
	lookup func(string) (string, bool)
	probs  *problems
}

// get returns a variable only when it is set; NORA treats an empty value as
// set in some places (NORA_NPM_PROXY="" means no upstream), so callers decide.
func (e env) get(name string) (string, bool) {
	if e.lookup == nil {
		return "", false
	}
	return e.lookup(name)
}

// nonEmpty returns a variable that is set to something other than "".
func (e env) nonEmpty(name string) (string, bool) {
	v, ok := e.get(name)
	return v, ok && v != ""
}

// boolean accepts true/1/false/0 (any case) and rejects anything else, so a
// typo such as NORA_CB_ENABLED=ture is not silently read as false.
func (e env) boolean(name string) (bool, bool) {
	v, ok := e.get(name)
	if !ok {
		return false, false
	}
	b, err := parseBool(v)
	if err != nil {
		e.probs.envf(name, v, "must be true, false, 1 or 0")
		return false, false
	}
	return b, true
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, strconv.ErrSyntax
}

// integer parses a whole number no smaller than min.
func (e env) integer(name string, min int64) (int, bool) {
	v, ok := e.get(name)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	switch {
	case err != nil:
		e.probs.envf(name, v, "not an integer")
	case n < min:
		e.probs.envf(name, v, "must be >= %d", min)
	case n > maxInt:
		e.probs.envf(name, v, "must be <= %d", maxInt)
	default:
		return int(n), true
	}
	return 0, false
}

// list splits a comma-separated variable, dropping empty entries the way
// NORA does, and trimming spaces around each entry.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
