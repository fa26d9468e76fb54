package pypi

import "bytes"

// The attribute scanner below finds where an href value sits in a raw tag,
// following the x/net/html tokenizer's attribute rules, so the rewriter can
// replace exactly those bytes and keep the rest of the page identical.

// attrSpan locates an attribute value inside a raw tag: raw[start:end] is
// the value without its quotes; quote is the quote byte, 0 when unquoted.
type attrSpan struct {
	start, end int
	quote      byte
}

// hrefValueSpan finds the value of the first href attribute with a value in
// a raw start tag. It follows x/net/html's readTag step by step, so it
// agrees with the tokenizer on where attributes begin and end.
func hrefValueSpan(raw []byte) (attrSpan, bool) {
	i := 2 // "<" and the first letter of the name, which the tokenizer took.
	for i < len(raw) {
		c := raw[i]
		i++
		if isHTMLSpace(c) {
			break
		}
		if c == '/' || c == '>' {
			i--
			break
		}
	}
	i = skipHTMLSpace(raw, i)
	for i < len(raw) && raw[i] != '>' {
		keyStart := i
		i = scanAttrKey(raw, i)
		key := raw[keyStart:i]
		var span attrSpan
		var hasVal bool
		i, span, hasVal = scanAttrVal(raw, i)
		if bytes.EqualFold(key, []byte("href")) {
			// The tokenizer keeps the first href, with or without a value.
			return span, hasVal
		}
		i = skipHTMLSpace(raw, i)
	}
	return attrSpan{}, false
}

// scanAttrKey mirrors readTagAttrKey and returns the end of the key.
func scanAttrKey(raw []byte, i int) int {
	start := i
	for i < len(raw) {
		c := raw[i]
		i++
		if c == '=' && start+1 == i {
			continue // a leading '=' belongs to the name
		}
		if c == '=' || c == '/' || c == '>' || isHTMLSpace(c) {
			return i - 1
		}
	}
	return i
}

// scanAttrVal mirrors readTagAttrVal. It returns the position after the
// value, its span, and whether there was a value at all.
func scanAttrVal(raw []byte, i int) (int, attrSpan, bool) {
	i = skipHTMLSpace(raw, i)
	if i >= len(raw) {
		return i, attrSpan{}, false
	}
	if c := raw[i]; c != '=' {
		if c == '/' {
			i++ // the tokenizer consumes a '/' here
		}
		return i, attrSpan{}, false
	}
	i = skipHTMLSpace(raw, i+1)
	if i >= len(raw) || raw[i] == '>' {
		return i, attrSpan{}, false
	}
	if q := raw[i]; q == '"' || q == '\'' {
		start := i + 1
		end := bytes.IndexByte(raw[start:], q)
		if end < 0 {
			return len(raw), attrSpan{start: start, end: len(raw), quote: q}, true
		}
		return start + end + 1, attrSpan{start: start, end: start + end, quote: q}, true
	}
	start := i
	for i < len(raw) && raw[i] != '>' && !isHTMLSpace(raw[i]) {
		i++
	}
	return i, attrSpan{start: start, end: i}, true
}

func isHTMLSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f'
}

func skipHTMLSpace(raw []byte, i int) int {
	for i < len(raw) && isHTMLSpace(raw[i]) {
		i++
	}
	return i
}
