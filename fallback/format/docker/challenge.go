package docker

import (
	"net/http"
	"slices"
	"strings"
)

// Challenge is one authentication challenge from a WWW-Authenticate header
// (RFC 7235). The header comes from an upstream we do not control, so the
// parser below accepts anything and keeps only what it can make sense of.
type Challenge struct {
	// Scheme is the auth-scheme in lower case ("bearer", "basic"), because
	// schemes compare case-insensitively and callers should not have to care.
	Scheme string
	// Realm and Service are the realm and service parameters, copied out of
	// Params because token negotiation needs them on every request.
	Realm, Service string
	// Scopes holds every scope the challenge asked for, in order and without
	// duplicates: a scope parameter may repeat and may itself list several
	// scopes separated by spaces.
	Scopes []string
	// Params holds every auth-param by lower-cased name; for a repeated
	// name the first value wins (scope is the exception, see Scopes).
	Params map[string]string
	// Token68 is the token68 form of credentials request ("Basic abc=="),
	// empty when the challenge carried auth-params instead.
	Token68 string
}

// maxChallenges bounds the work done on one hostile header; real registries
// send one or two challenges.
const maxChallenges = 64

// parseChallenges parses the values of one or more WWW-Authenticate headers.
// Each value may hold several comma-separated challenges. Malformed parts are
// skipped rather than failing the whole header, because a registry with a
// sloppy header is still worth talking to.
func parseChallenges(header []string) []Challenge {
	var out []Challenge
	for _, v := range header {
		p := challengeParser{s: v}
		for len(out) < maxChallenges {
			ch, ok := p.next()
			if !ok {
				break
			}
			out = append(out, ch)
		}
	}
	return out
}

// bearerChallenge returns the first Bearer challenge with a realm in h,
// the only kind docker token negotiation can answer.
func bearerChallenge(h http.Header) (Challenge, bool) {
	for _, ch := range parseChallenges(h.Values("Www-Authenticate")) {
		if ch.Scheme == "bearer" && ch.Realm != "" {
			return ch, true
		}
	}
	return Challenge{}, false
}

// challengeParser walks one header value. Every method consumes at least one
// byte or reports that it consumed nothing, so the loops always terminate.
type challengeParser struct {
	s   string
	pos int
}

// next returns the next challenge in the value, or false at the end.
func (p *challengeParser) next() (Challenge, bool) {
	for p.pos < len(p.s) {
		p.skip(", \t")
		if p.pos >= len(p.s) {
			break
		}
		scheme := p.token()
		if scheme == "" {
			// Garbage where a scheme should start: drop it up to the next
			// comma and try again.
			p.skipPast(',')
			continue
		}
		ch := Challenge{Scheme: strings.ToLower(scheme), Params: map[string]string{}}
		p.params(&ch)
		return ch, true
	}
	return Challenge{}, false
}

// params reads the token68 or auth-params following a scheme, stopping before
// the scheme of the next challenge.
func (p *challengeParser) params(ch *Challenge) {
	if !p.atSpace() {
		return // "Bearer," or end: a challenge without parameters.
	}
	p.skip(" \t")
	if t := p.token68(); t != "" {
		ch.Token68 = t
		return
	}
	for p.pos < len(p.s) {
		p.skip(", \t")
		start := p.pos
		name := p.token()
		if name == "" {
			if p.pos >= len(p.s) {
				return
			}
			p.skipPast(',') // not a parameter: skip this item.
			continue
		}
		p.skip(" \t")
		if !p.consume('=') {
			p.pos = start // a bare token starts the next challenge.
			return
		}
		p.skip(" \t")
		var value string
		if p.pos < len(p.s) && p.s[p.pos] == '"' {
			value = p.quoted()
		} else {
			value = p.token()
		}
		ch.addParam(strings.ToLower(name), value)
	}
}

// addParam records one auth-param, splitting scope values into scopes.
func (ch *Challenge) addParam(name, value string) {
	if name == "scope" {
		for _, sc := range strings.Fields(value) {
			if !slices.Contains(ch.Scopes, sc) {
				ch.Scopes = append(ch.Scopes, sc)
			}
		}
	}
	if _, dup := ch.Params[name]; dup {
		return
	}
	ch.Params[name] = value
	switch name {
	case "realm":
		ch.Realm = value
	case "service":
		ch.Service = value
	}
}

// token68 reads a token68 if the rest of this challenge is exactly one; it
// consumes nothing otherwise.
func (p *challengeParser) token68() string {
	i := p.pos
	for i < len(p.s) && isToken68Char(p.s[i]) {
		i++
	}
	if i == p.pos {
		return ""
	}
	for i < len(p.s) && p.s[i] == '=' {
		i++
	}
	j := i
	for j < len(p.s) && (p.s[j] == ' ' || p.s[j] == '\t') {
		j++
	}
	if j < len(p.s) && p.s[j] != ',' {
		return "" // "realm=..." or "a b": auth-params or a new challenge.
	}
	t := p.s[p.pos:i]
	p.pos = j
	return t
}

// quoted reads a quoted-string starting at the opening quote and returns its
// content with quoted-pairs resolved. An unterminated string runs to the end.
func (p *challengeParser) quoted() string {
	p.pos++ // opening quote
	var b strings.Builder
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		p.pos++
		switch {
		case c == '"':
			return b.String()
		case c == '\\' && p.pos < len(p.s):
			b.WriteByte(p.s[p.pos])
			p.pos++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// token reads an RFC 7230 token, possibly empty.
func (p *challengeParser) token() string {
	start := p.pos
	for p.pos < len(p.s) && isTokenChar(p.s[p.pos]) {
		p.pos++
	}
	return p.s[start:p.pos]
}

func (p *challengeParser) atSpace() bool {
	return p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t')
}

func (p *challengeParser) consume(c byte) bool {
	if p.pos < len(p.s) && p.s[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *challengeParser) skip(set string) {
	for p.pos < len(p.s) && strings.IndexByte(set, p.s[p.pos]) >= 0 {
		p.pos++
	}
}

// skipPast moves past the next occurrence of c, or to the end.
func (p *challengeParser) skipPast(c byte) {
	if i := strings.IndexByte(p.s[p.pos:], c); i >= 0 {
		p.pos += i + 1
		return
	}
	p.pos = len(p.s)
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isToken68Char(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~+/", c) >= 0
}
