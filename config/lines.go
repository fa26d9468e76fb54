package config

import (
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// keyLines maps every key path in a TOML document to the line it is written
// on, so that a semantic problem found after decoding (failure_threshold = 0)
// can still point at its line. Paths are built by joinKey; array elements and
// [[array tables]] get an "[i]" suffix.
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	p := unstable.Parser{}
	p.Reset(data)
	var table string
	arrayCount := map[string]int{}
	for p.NextExpression() {
		expr := p.Expression()
		switch expr.Kind {
		case unstable.Table, unstable.ArrayTable:
			name, first := keyOf(expr.Key())
			if expr.Kind == unstable.ArrayTable {
				n := arrayCount[name]
				arrayCount[name] = n + 1
				name += "[" + strconv.Itoa(n) + "]"
			}
			table = name
			if first != nil {
				setLine(lines, table, p.Shape(first.Raw).Start.Line)
			}
		case unstable.KeyValue:
			indexKeyValue(&p, lines, table, expr)
		}
	}
	// A parse error simply ends the index early: the decoder reports it.
	return lines
}

func setLine(lines map[string]int, path string, line int) {
	if _, ok := lines[path]; !ok {
		lines[path] = line
	}
}

// keyOf joins a (possibly dotted) key and returns its first part's node.
func keyOf(it unstable.Iterator) (string, *unstable.Node) {
	var path string
	var first *unstable.Node
	for it.Next() {
		n := it.Node()
		if first == nil {
			first = n
		}
		path = joinKey(path, string(n.Data))
	}
	return path, first
}

func indexKeyValue(p *unstable.Parser, lines map[string]int, table string, kv *unstable.Node) {
	it := kv.Key()
	path := table
	line := 0
	for it.Next() {
		n := it.Node()
		if line == 0 {
			line = p.Shape(n.Raw).Start.Line
		}
		path = joinKey(path, string(n.Data))
		setLine(lines, path, line)
	}
	indexValue(p, lines, path, kv.Value(), line)
}

// indexValue records the elements of arrays and the keys of inline tables.
func indexValue(p *unstable.Parser, lines map[string]int, path string, v *unstable.Node, line int) {
	switch v.Kind {
	case unstable.Array:
		i := 0
		for it := v.Children(); it.Next(); i++ {
			child := it.Node()
			elem := path + "[" + strconv.Itoa(i) + "]"
			setLine(lines, elem, lineOfValue(p, child, line))
			indexValue(p, lines, elem, child, line)
		}
	case unstable.InlineTable:
		for it := v.Children(); it.Next(); {
			if child := it.Node(); child.Kind == unstable.KeyValue {
				indexKeyValue(p, lines, path, child)
			}
		}
	}
}

// lineOfValue finds a value's line; containers have no range of their own,
// so they borrow their first key or element's line, else the parent's.
func lineOfValue(p *unstable.Parser, v *unstable.Node, fallback int) int {
	if v.Raw.Length > 0 {
		return p.Shape(v.Raw).Start.Line
	}
	if c := v.Child(); c != nil {
		if c.Kind == unstable.KeyValue {
			if k := c.Key(); k.Next() {
				return p.Shape(k.Node().Raw).Start.Line
			}
		}
		return lineOfValue(p, c, fallback)
	}
	return fallback
}

// joinKey appends one key part to a dotted path, quoting parts that are not
// bare keys so that `overrides."pypi:https://x"` reads as written.
func joinKey(path, part string) string {
	if !isBareKey(part) {
		part = strconv.Quote(part)
	}
	if path == "" {
		return part
	}
	return path + "." + part
}

func isBareKey(s string) bool {
	if s == "" {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) < 0
}
