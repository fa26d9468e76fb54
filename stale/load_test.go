package stale

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// entryDir is the directory of key's entry under dir.
func entryDir(dir, key string) string { return filepath.Join(dir, keyHash(key)[:2]) }

func writeFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestRestartServesEntryAndDropsDebris(t *testing.T) {
	dir := t.TempDir()
	first, _ := newTestCache(t, Options{Dir: dir})
	store(t, first, "keep", "kept body")
	store(t, first, "old", "older")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	h := keyHash("keep")
	leftoverTmp := filepath.Join(entryDir(dir, "keep"), h+".99999999999.body.tmp")
	writeFile(t, leftoverTmp, "partial")
	orphan := filepath.Join(entryDir(dir, "keep"), h+".99999999999.body")
	writeFile(t, orphan, "a body no meta names (crash before the meta rename)")
	bad := keyHash("corrupt")
	corruptMeta := filepath.Join(entryDir(dir, "corrupt"), bad+metaSuffix)
	corruptBody := filepath.Join(entryDir(dir, "corrupt"), bad+".1.body")
	writeFile(t, corruptMeta, `{"v":1,"key":"corr`)
	writeFile(t, corruptBody, "x")
	foreign := filepath.Join(dir, "README")
	writeFile(t, foreign, "not ours")

	second, reg := newTestCache(t, Options{Dir: dir})
	if got, ok := lookupBody(t, second, "keep"); !ok || got != "kept body" {
		t.Fatalf("after restart entry = %q, %v", got, ok)
	}
	// Everything but the foreign file counts.
	if b, n := second.Stats(); b != diskUsage(t, dir)-diskUsage(t, foreign) || n != 2 {
		t.Errorf("Stats = %d, %d; the cache's files take %d", b, n, diskUsage(t, dir)-diskUsage(t, foreign))
	}
	if v := metricValue(t, reg, "nora_sidecar_stale_cache_objects"); v != 2 {
		t.Errorf("objects gauge = %v after load", v)
	}
	for _, p := range []string{leftoverTmp, orphan, corruptMeta, corruptBody} {
		if exists(p) {
			t.Errorf("%s survived the restart", filepath.Base(p))
		}
	}
	if !exists(foreign) {
		t.Error("a file the cache did not write was removed")
	}
}

func TestRestartEvictsOldestToNewBound(t *testing.T) {
	dir := t.TempDir()
	clk := testkit.NewClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	first, _ := newTestCache(t, Options{Dir: dir, Now: clk.Now})
	for _, k := range []string{"a", "b", "c"} {
		store(t, first, k, strings.Repeat(k, 10))
		clk.Advance(time.Minute)
	}
	first.Close()

	second, _ := newTestCache(t, Options{Dir: dir, MaxBytes: roomFor(t, dir, 2), MaxObjectBytes: 20})
	for key, want := range map[string]bool{"a": false, "b": true, "c": true} {
		if _, ok := lookupBody(t, second, key); ok != want {
			t.Errorf("%s present = %v, want %v", key, ok, want)
		}
	}
	if exists(filepath.Join(entryDir(dir, "a"), keyHash("a")+metaSuffix)) {
		t.Error("evicted entry's metadata is still on disk")
	}
}

// validMeta returns a metadata document for key naming body.
func validMeta(key, body string, size int64) meta {
	return meta{Version: metaVersion, Key: key, Status: 200, Size: size,
		StoredAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), Body: body,
		Header: map[string][]string{"Content-Type": {"text/plain"}}}
}

func TestDecodeMeta(t *testing.T) {
	h := keyHash("k")
	good := validMeta("k", h+".42.body", 3)
	tests := []struct {
		name   string
		mutate func(m *meta)
		raw    string
		ok     bool
	}{
		{name: "valid", mutate: func(*meta) {}, ok: true},
		{name: "not JSON", raw: "\x00garbage"},
		{name: "empty", raw: ""},
		{name: "truncated", raw: `{"v":1,"key":"k"`},
		{name: "wrong version", mutate: func(m *meta) { m.Version = metaVersion + 1 }},
		{name: "version 1 did not record credentials", mutate: func(m *meta) { m.Version = 1 }},
		{name: "key of another file", mutate: func(m *meta) { m.Key = "other" }},
		{name: "status out of range", mutate: func(m *meta) { m.Status = 1000 }},
		{name: "negative size", mutate: func(m *meta) { m.Size = -1 }},
		{name: "no stored_at", mutate: func(m *meta) { m.StoredAt = time.Time{} }},
		{name: "body escapes the directory", mutate: func(m *meta) { m.Body = "../../etc/passwd" }},
		{name: "body of another key", mutate: func(m *meta) { m.Body = keyHash("x") + ".1.body" }},
		{name: "body with path", mutate: func(m *meta) { m.Body = h + ".1/../x.body" }},
		{name: "body without number", mutate: func(m *meta) { m.Body = h + "..body" }},
		{name: "bad header name", mutate: func(m *meta) { m.Header = map[string][]string{"Bad Name": {"v"}} }},
		{name: "header value with newline", mutate: func(m *meta) { m.Header = map[string][]string{"X": {"a\r\nInjected: 1"}} }},
		{name: "oversized", raw: `{"v":1,"key":"` + strings.Repeat("a", maxMetaBytes) + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.raw)
			if tt.mutate != nil {
				m := good
				tt.mutate(&m)
				data, _ = json.Marshal(m)
			}
			m, err := decodeMeta(data, h)
			if (err == nil) != tt.ok {
				t.Fatalf("decodeMeta err = %v, want ok=%v", err, tt.ok)
			}
			if tt.ok && (m.Key != "k" || m.Size != 3 || m.Header.Get("Content-Type") != "text/plain") {
				t.Errorf("decoded %+v", m)
			}
		})
	}
}

// FuzzLoadMeta feeds arbitrary bytes to the loader as the metadata file of a
// key whose body exists: Open must never panic, and the file must either load
// as a well-formed entry or be removed.
func FuzzLoadMeta(f *testing.F) {
	const key = "https://registry.npmjs.org/lodash\naccept=application/json"
	h := keyHash(key)
	body := h + ".7.body"
	seed := func(m meta) { b, _ := json.Marshal(m); f.Add(b) }
	seed(validMeta(key, body, 5))
	seed(validMeta(key, body, 4))
	seed(validMeta(key, "../"+body, 5))
	seed(validMeta("other", body, 5))
	// Well-formed entries that a plain lookup would not return: another
	// client's copy, a variant, a compressed body.
	for _, mutate := range []func(*meta){
		func(m *meta) { m.Cred = "abc" },
		func(m *meta) {
			m.Header.Set("Vary", "Accept")
			m.VarySHA256 = map[string]string{"Accept": strings.Repeat("0", 64)}
		},
		// An older version's, with the value in clear: refused.
		func(m *meta) { m.Header.Set("Vary", "Accept"); m.ClearVary = map[string]string{"Accept": "text/html"} },
		func(m *meta) { m.Header.Set("Content-Encoding", "gzip") },
	} {
		m := validMeta(key, body, 5)
		mutate(&m)
		seed(m)
	}
	f.Add([]byte(`{"v":2,"key":null,"header":{"a":[null]},"stored_at":"bad"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	// One directory per fuzz worker process: iterations run one at a time and
	// each rewrites both files, which keeps an iteration cheap.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		metaPath := filepath.Join(dir, h[:2], h+metaSuffix)
		writeFile(t, filepath.Join(dir, h[:2], body), "hello")
		writeFile(t, metaPath, string(data))
		c, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer c.Close()
		// Judged by the index, not by a lookup: Find also refuses entries
		// that loaded fine but belong to another credential or variant.
		c.mu.Lock()
		it, loaded := c.index[key]
		c.mu.Unlock()
		_, objects := c.Stats()
		switch {
		case loaded:
			m := it.meta
			if objects != 1 || m.Size != 5 || m.Status < 200 || m.Status > 599 || !exists(metaPath) {
				t.Fatalf("loaded a bad entry: objects %d, size %d, status %d", objects, m.Size, m.Status)
			}
			if got, err := os.ReadFile(c.bodyPath(it.hash, m.Body)); err != nil || string(got) != "hello" {
				t.Fatalf("loaded entry's body: %q, %v", got, err)
			}
		case objects != 0 || exists(metaPath):
			t.Fatalf("refused metadata was kept: objects %d, meta on disk %v", objects, exists(metaPath))
		}
	})
}
