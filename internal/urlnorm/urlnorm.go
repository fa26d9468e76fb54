// Package urlnorm is the one rule for comparing and keying escaped URL
// paths: percent-encodings that mean the same byte are one spelling
// (RFC 3986 §6.2.2.1), so "/@acme%2futil" (npm, yarn) and "/@acme%2Futil"
// (pnpm) are one package.
package urlnorm

import "strings"

// Path returns the escaped path p with the hexadecimal digits of every
// percent-encoding in upper case. Everything else is left as it is: which
// bytes are encoded at all is the client's choice and may mean something
// to the server (an encoded slash is not a slash).
func Path(p string) string {
	i := strings.IndexByte(p, '%')
	if i < 0 {
		return p
	}
	var b []byte
	for ; i >= 0 && i+2 < len(p); i = nextPercent(p, i+1) {
		if !isHex(p[i+1]) || !isHex(p[i+2]) {
			continue
		}
		for _, j := range []int{i + 1, i + 2} {
			if c := p[j]; 'a' <= c && c <= 'f' {
				if b == nil {
					b = []byte(p)
				}
				b[j] = c - 'a' + 'A'
			}
		}
	}
	if b == nil {
		return p
	}
	return string(b)
}

func nextPercent(p string, from int) int {
	j := strings.IndexByte(p[from:], '%')
	if j < 0 {
		return -1
	}
	return from + j
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
