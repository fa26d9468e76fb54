package config

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// doc is a decoded TOML file plus the line of every key. NORA's file holds
// many tables and keys this proxy never reads, so decoding goes into a
// generic map and each reader pulls out only what it needs, with a type
// check that names the key and its line.
type doc struct {
	source string // "file <path>"
	lines  map[string]int
	probs  *problems
}

// decodeFile parses data; a syntax error is recorded and nil returned.
func decodeFile(path string, data []byte, probs *problems) (tbl, bool) {
	d := &doc{source: "file " + path, probs: probs}
	var m map[string]any
	if err := toml.Unmarshal(data, &m); err != nil {
		e := &Error{Source: d.source, Problem: "invalid TOML: " + err.Error()}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			e.Line, _ = de.Position()
			e.Problem = "invalid TOML: " + strings.TrimPrefix(de.Error(), "toml: ")
		}
		probs.add(e)
		return tbl{}, false
	}
	d.lines = keyLines(data)
	return tbl{d: d, m: m}, true
}

// tbl is one TOML table at a known key path. The zero tbl is an absent
// table: every getter reports "not set" and no problem.
type tbl struct {
	d    *doc
	path string
	m    map[string]any
}

func (t tbl) present() bool { return t.m != nil }

func (t tbl) keyPath(key string) string { return joinKey(t.path, key) }

// line returns the line of path, walking up to the closest ancestor known.
func (t tbl) line(path string) int {
	for path != "" {
		if l, ok := t.d.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// at returns where key lives, for problems found later.
func (t tbl) at(path string) origin {
	return origin{source: t.d.source, key: path, line: t.line(path)}
}

func (t tbl) errorf(path, format string, args ...any) {
	t.d.probs.add(t.at(path).errorf(format, args...))
}

// table returns the sub-table key; a value of another type is a problem.
func (t tbl) table(key string) tbl {
	v, ok := t.m[key]
	if !ok {
		return tbl{}
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.errorf(t.keyPath(key), "must be a table, not %s", typeName(v))
		return tbl{}
	}
	return tbl{d: t.d, path: t.keyPath(key), m: m}
}

// keys returns the table's keys in file order (line, then name), because
// Go maps forget the order in which rpm/deb repositories were written.
func (t tbl) keys() []string {
	keys := make([]string, 0, len(t.m))
	for k := range t.m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		li, lj := t.line(t.keyPath(keys[i])), t.line(t.keyPath(keys[j]))
		if li != lj {
			return li < lj
		}
		return keys[i] < keys[j]
	})
	return keys
}

func (t tbl) str(key string) (string, bool) {
	v, ok := t.m[key]
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		t.errorf(t.keyPath(key), "must be a string, not %s", typeName(v))
		return "", false
	}
	return s, true
}

func (t tbl) boolean(key string) (bool, bool) {
	v, ok := t.m[key]
	if !ok {
		return false, false
	}
	b, ok := v.(bool)
	if !ok {
		t.errorf(t.keyPath(key), "must be true or false, not %s", typeName(v))
		return false, false
	}
	return b, true
}

// integer returns key as an int no smaller than min (and small enough that
// seconds fit a time.Duration).
func (t tbl) integer(key string, min int64) (int, bool) {
	v, ok := t.m[key]
	if !ok {
		return 0, false
	}
	n, ok := v.(int64)
	if !ok {
		t.errorf(t.keyPath(key), "must be an integer, not %s", typeName(v))
		return 0, false
	}
	if n < min {
		t.errorf(t.keyPath(key), "must be >= %d (got %d)", min, n)
		return 0, false
	}
	if n > maxInt {
		t.errorf(t.keyPath(key), "must be <= %d (got %d)", maxInt, n)
		return 0, false
	}
	return int(n), true
}

// strList returns key as a list of strings.
func (t tbl) strList(key string) ([]string, bool) {
	v, ok := t.m[key]
	if !ok {
		return nil, false
	}
	list, ok := v.([]any)
	if !ok {
		t.errorf(t.keyPath(key), "must be a list of strings, not %s", typeName(v))
		return nil, false
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			t.errorf(t.keyPath(key)+"["+strconv.Itoa(i)+"]", "must be a string, not %s", typeName(e))
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// maxInt bounds every integer we accept: large enough for any sane count or
// number of seconds, small enough that seconds*time.Second cannot overflow.
const maxInt = math.MaxInt32

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprintf("a %T", v)
	}
}
