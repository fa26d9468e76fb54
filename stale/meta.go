package stale

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// File naming inside Dir. Every entry lives in the subdirectory named by the
// first two hex digits of its key hash, which keeps directories small:
//
//	<hash>.meta          the committed metadata (JSON); its rename is the commit
//	<hash>.<n>.body      the body it names; unique per write, never overwritten
//	*.tmp                a write in progress; always garbage after a restart
const (
	metaSuffix = ".meta"
	bodySuffix = ".body"
	tmpSuffix  = ".tmp"

	// metaVersion 2 added Cred; version 1 entries did not record who
	// stored them, so they cannot be checked and are dropped at load.
	// Version 3 keys hold digests of query values (writeQueryDigests);
	// a version 2 entry is kept only when its URL has no query, since
	// its key holds the values in clear.
	metaVersion = 3
	// maxMetaBytes bounds what the loader reads from one metadata file; real
	// ones hold a key and a response's headers, far below this.
	maxMetaBytes = 1 << 20
)

// errBadMeta marks a metadata file the loader refuses; such files are removed.
var errBadMeta = errors.New("invalid stale cache metadata")

// meta is the JSON document committed for each entry.
type meta struct {
	Version  int         `json:"v"`
	Key      string      `json:"key"`
	Status   int         `json:"status"`
	Header   http.Header `json:"header"`
	Size     int64       `json:"size"`
	StoredAt time.Time   `json:"stored_at"`
	// Body is the base name of the body file in the same directory.
	Body string `json:"body"`
	// Cred is the credential digest of the request that stored the copy
	// ("" when it carried none); see Ref.servable.
	Cred string `json:"cred,omitempty"`
	// BodySHA256 is "sha256:<hex>" of a docker manifest's body (a GET's,
	// any status), the digest the copy may be found by; see
	// dockercopies.go. Copies written before it was recorded get it at load.
	BodySHA256 string `json:"body_sha256,omitempty"`
	// HeadLength is the Content-Length a kept HEAD answer announced.
	HeadLength int64 `json:"head_length,omitempty"`
	// VarySHA256 holds digests of the storing request's values of the
	// headers the answer varies by (its Vary header, Accept-Encoding
	// aside); see variantMatches.
	VarySHA256 map[string]string `json:"vary_sha256,omitempty"`
	// ClearVary is where versions before VarySHA256 kept those values, in
	// clear (credentials included). It is never written; a file that has
	// it is dropped at load, which removes the values from the disk.
	ClearVary map[string]string `json:"vary,omitempty"`
}

// keyHash is the hex SHA-256 of a cache key: the on-disk name of its entry.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// decodeMeta parses and checks a metadata file named hash+".meta". Every field
// is verified because the file may be truncated, hand-edited or from another
// program: a meta that names a body outside its own entry could otherwise make
// the loader delete or serve an arbitrary file.
func decodeMeta(data []byte, hash string) (*meta, error) {
	if len(data) > maxMetaBytes {
		return nil, fmt.Errorf("%w: %d bytes", errBadMeta, len(data))
	}
	var m meta
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadMeta, err)
	}
	switch {
	case m.Version == metaVersion-1 && keyHasQuery(m.Key):
		return nil, fmt.Errorf("%w: version %d with query values in clear", errBadMeta, m.Version)
	case m.Version != metaVersion && m.Version != metaVersion-1:
		return nil, fmt.Errorf("%w: version %d", errBadMeta, m.Version)
	case m.Key == "" || keyHash(m.Key) != hash:
		return nil, fmt.Errorf("%w: key does not match file name", errBadMeta)
	case m.Status < 200 || m.Status > 599:
		return nil, fmt.Errorf("%w: status %d", errBadMeta, m.Status)
	case m.Size < 0 || m.HeadLength < 0:
		return nil, fmt.Errorf("%w: size %d", errBadMeta, m.Size)
	case m.StoredAt.IsZero():
		return nil, fmt.Errorf("%w: no stored_at", errBadMeta)
	case !validBodyName(m.Body, hash):
		return nil, fmt.Errorf("%w: body name", errBadMeta)
	case m.BodySHA256 != "" && !validDigest(m.BodySHA256):
		return nil, fmt.Errorf("%w: body digest", errBadMeta)
	}
	for k, vs := range m.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("%w: header name", errBadMeta)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, fmt.Errorf("%w: header value", errBadMeta)
			}
		}
	}
	if len(m.ClearVary) > 0 {
		return nil, fmt.Errorf("%w: vary values in clear (an older version's)", errBadMeta)
	}
	for k, v := range m.VarySHA256 {
		if !httpguts.ValidHeaderFieldName(k) || !validHash(v) {
			return nil, fmt.Errorf("%w: vary header", errBadMeta)
		}
	}
	if m.Header == nil {
		m.Header = http.Header{}
	}
	return &m, nil
}

// keyHasQuery reports a key whose URL (its first line) has a query.
func keyHasQuery(key string) bool {
	url, _, _ := strings.Cut(key, "\n")
	return strings.Contains(url, "?")
}

// validBodyName accepts only "<hash>.<digits>.body": a plain name in the
// entry's own directory that belongs to this key.
func validBodyName(name, hash string) bool {
	mid, ok := strings.CutPrefix(name, hash+".")
	if !ok {
		return false
	}
	mid, ok = strings.CutSuffix(mid, bodySuffix)
	if !ok || mid == "" {
		return false
	}
	for _, r := range mid {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// validDigest reports whether d is "sha256:" and 64 lower-case hex digits.
func validDigest(d string) bool {
	hexSum, ok := strings.CutPrefix(d, "sha256:")
	return ok && validHash(hexSum)
}

// validHash reports whether s looks like a key hash (64 lower-case hex digits).
func validHash(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
