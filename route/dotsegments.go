package route

import "strings"

// Dot segments are resolved before a request path is matched against an
// upstream's base path, and a path that would climb above it is refused
// (docs/behaviour.md §3, §10): otherwise "/maven2/../../admin" addressed to
// one upstream would be sent, below another upstream's base path and with
// that upstream's credentials, to wherever it climbs.

// resolveDots removes "." and ".." segments from an escaped path as RFC 3986
// §5.2.4 does, counting their percent-encoded forms (%2e) as dots. When
// loose is set, encoded slashes (%2f) and backslashes (%5c) also separate
// segments, as some servers decode them. It reports whether the path tried
// to climb above its root.
func resolveDots(path string, loose bool) (resolved string, climbed bool) {
	if !strings.ContainsAny(path, `%\`) && !strings.Contains(path, "/.") && !strings.HasPrefix(path, ".") {
		// No segment can be a dot segment and nothing decodes to a
		// separator: the path is its own resolution, in either mode.
		return path, false
	}
	return resolveSegments(path, loose)
}

// resolveSegments is resolveDots without its shortcut.
func resolveSegments(path string, loose bool) (resolved string, climbed bool) {
	if loose {
		path = replaceFold(path, "%2f", "/")
		path = replaceFold(path, "%5c", "/")
		path = strings.ReplaceAll(path, `\`, "/")
	}
	segs := strings.Split(path, "/")
	out := make([]string, 0, len(segs))
	for i, seg := range segs {
		last := i == len(segs)-1
		switch dots(seg) {
		case 1:
			if last {
				out = append(out, "")
			}
		case 2:
			if len(out) > 1 {
				out = out[:len(out)-1]
			} else {
				climbed = true
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	resolved = strings.Join(out, "/")
	if strings.HasPrefix(path, "/") && !strings.HasPrefix(resolved, "/") {
		resolved = "/" + resolved
	}
	return resolved, climbed
}

// dots returns 1 for a "." segment, 2 for "..", in any mix of literal and
// percent-encoded dots; 0 otherwise.
func dots(seg string) int {
	n := 0
	for len(seg) > 0 {
		switch {
		case seg[0] == '.':
			seg = seg[1:]
		case len(seg) >= 3 && seg[0] == '%' && seg[1] == '2' && (seg[2] == 'e' || seg[2] == 'E'):
			seg = seg[3:]
		default:
			return 0
		}
		n++
		if n > 2 {
			return 0
		}
	}
	return n
}

// replaceFold replaces every occurrence of a lower-case ASCII old (of
// escapes such as "%2f") in s, whatever its case.
func replaceFold(s, old, new string) string {
	if !strings.Contains(strings.ToLower(s), old) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if i+len(old) <= len(s) && strings.EqualFold(s[i:i+len(old)], old) {
			b.WriteString(new)
			i += len(old)
			continue
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}
