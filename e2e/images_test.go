//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pushImage pushes a one-layer image to a plain-HTTP registry with crane:
// the layer tarball on an empty base, then its config given a platform
// (linux/amd64), since containerd pulls only images for its own platform
// and an empty base names none.
func pushImage(t *testing.T, dir, crane string, env []string, layer, ref string) {
	t.Helper()
	mustRun(t, dir, env, time.Minute, crane, "append", "--insecure", "-f", layer, "-t", ref)
	mustRun(t, dir, env, time.Minute, crane, "mutate", "--insecure", "--set-platform", "linux/amd64", "-t", ref, ref)
}

// registryDigest is the manifest digest of ref, asked of the registry itself
// (plain HTTP, not through the proxy).
func registryDigest(t *testing.T, dir, crane string, env []string, ref string) string {
	t.Helper()
	d := strings.TrimSpace(mustRun(t, dir, env, time.Minute, crane, "digest", "--insecure", ref).out)
	if !strings.HasPrefix(d, "sha256:") {
		t.Fatalf("crane digest %s printed %q", ref, d)
	}
	return d
}

// ociLayoutDigest reads the manifest digest a `crane pull --format=oci`
// wrote into the layout's index.json.
func ociLayoutDigest(t *testing.T, layout string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		t.Fatalf("pulled layout: %v", err)
	}
	var idx struct {
		Manifests []struct {
			Digest string `json:"digest"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("pulled layout index.json: %v: %s", err, b)
	}
	return idx.Manifests[0].Digest
}

// helloFile and helloBody are the one file of the test image's layer.
const (
	helloFile = "hello.txt"
	helloBody = "hello from the nora-breaker e2e image\n"
)

// fileLayer writes a layer tarball holding one file.
func fileLayer(t *testing.T, path, name, body string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(body))
	tw.Close()
	writeFile(t, path, buf.String())
}

// layerDigest is the digest of the first layer of ref's manifest, asked of
// the registry itself.
func layerDigest(t *testing.T, dir, crane string, env []string, ref string) string {
	t.Helper()
	r := mustRun(t, dir, env, time.Minute, crane, "manifest", "--insecure", ref)
	var m struct {
		Layers []struct {
			Digest string `json:"digest"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(r.out), &m); err != nil || len(m.Layers) == 0 {
		t.Fatalf("crane manifest %s: %v: %s", ref, err, r.out)
	}
	return m.Layers[0].Digest
}
