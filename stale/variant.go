package stale

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"strings"
)

// A stored answer is only served to a request it could have been the
// answer to (docs/behaviour.md §6): each of its content codings must be one
// the request accepts, and the request's values of every other header the
// answer's Vary names must equal those of the request that stored it.
//
// Those values are kept as digests, never in clear: the .meta file is at
// rest in stale_dir, and an upstream may vary by Authorization, Cookie or
// any other header that carries a secret (§10), configured as one or not.
// Equal digests are equal values, which is all the match needs.

// varyDigests records, for each header resp varies by (Accept-Encoding
// aside, which is judged by the stored Content-Encoding), a digest of the
// request's value.
func varyDigests(resp http.Header, req http.Header) map[string]string {
	var out map[string]string
	for _, name := range varyNames(resp) {
		if name == "Accept-Encoding" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = valueDigest(req, name)
	}
	return out
}

// valueDigest is the hex SHA-256 of a header's normalValue, as the key
// digests credentials (key.go).
func valueDigest(h http.Header, name string) string {
	sum := sha256.Sum256([]byte(normalValue(h, name)))
	return hex.EncodeToString(sum[:])
}

// variantMatches reports whether a request with headers req may be served
// the stored answer m.
func variantMatches(m *meta, req http.Header) bool {
	if !acceptsCodings(req, m.Header) {
		return false
	}
	for name, want := range m.VarySHA256 {
		if valueDigest(req, name) != want {
			return false
		}
	}
	return true
}

// variesByEverything reports "Vary: *": the answer depends on things no
// request header shows, so no stored copy can be matched to a request.
func variesByEverything(resp http.Header) bool {
	for _, n := range varyNames(resp) {
		if n == "*" {
			return true
		}
	}
	return false
}

// varyNames lists the header names of resp's Vary, canonicalised.
func varyNames(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Vary") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out = append(out, http.CanonicalHeaderKey(name))
			}
		}
	}
	return out
}

// normalValue joins a header's values the way a comparison needs them:
// comma-separated, each trimmed.
func normalValue(h http.Header, name string) string {
	var parts []string
	for _, v := range h.Values(name) {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
	}
	return strings.Join(parts, ",")
}

// acceptsCodings reports whether a request with headers req can read a
// body coded as stored says: a body coded twice ("gzip, br", or gzip and
// br on two lines) needs a client that decodes every coding, so each one
// of every Content-Encoding line must be acceptable (identity is no
// coding).
func acceptsCodings(req, stored http.Header) bool {
	for _, v := range stored.Values("Content-Encoding") {
		for enc := range strings.SplitSeq(v, ",") {
			enc = strings.TrimSpace(enc)
			if enc != "" && !strings.EqualFold(enc, "identity") && !acceptsEncoding(req, enc) {
				return false
			}
		}
	}
	return true
}

// acceptsEncoding reports whether Accept-Encoding in h admits enc: named
// (or "*") with a q-value above zero.
func acceptsEncoding(h http.Header, enc string) bool {
	star := false
	for _, v := range h.Values("Accept-Encoding") {
		for item := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
			name = strings.TrimSpace(name)
			zero := qIsZero(params)
			switch {
			case strings.EqualFold(name, enc):
				return !zero
			case name == "*":
				star = !zero
			}
		}
	}
	return star
}

// qIsZero reports a q-value of zero (";q=0", ";q=0.000"): "not acceptable".
func qIsZero(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return err == nil && q == 0
		}
	}
	return false
}

// errDigestMismatch: the body's bytes are not those its digest names.
var errDigestMismatch = errors.New("body does not match its digest")

// digestCheck hashes a body to compare it with its docker digest.
type digestCheck struct {
	want string // hex
	h    hash.Hash
}

// newDigestCheck checks against digest ("sha256:<hex>"); nil for none.
func newDigestCheck(digest string) *digestCheck {
	algo, hexSum, ok := strings.Cut(digest, ":")
	if !ok || algo != "sha256" {
		return nil
	}
	return &digestCheck{want: hexSum, h: sha256.New()}
}

func (d *digestCheck) write(b []byte) {
	if d != nil {
		d.h.Write(b)
	}
}

// matches reports whether the bytes written hash to the digest (always
// true without a digest).
func (d *digestCheck) matches() bool {
	return d == nil || hex.EncodeToString(d.h.Sum(nil)) == d.want
}
