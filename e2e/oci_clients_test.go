//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// ociClient is one OCI client of the scenario. fetch runs it once, into a
// fresh folder, through n, and compares what it wrote with the origin's:
// the error says what differed.
type ociClient struct {
	id, name string
	compared string // what fetch compares, for the summary
	fetch    func(t *testing.T, n *nora) (clientRun, error)
}

// mustFetch is fetch that fails the test on any difference.
func (c ociClient) mustFetch(t *testing.T, n *nora, what string) clientRun {
	t.Helper()
	r, err := c.fetch(t, n)
	if err != nil {
		t.Fatalf("%s: %s: %v\n%s", what, c.name, err, tail(r.out, 3000))
	}
	return r
}

// clients are skopeo, oras and helm, in that order. skopeo (Debian's)
// trusts the interception CA from a certs folder, oras and helm from
// their --ca-file; all three take the proxy from HTTPS_PROXY.
func (e *ociEnv) clients() []ociClient {
	return []ociClient{
		{id: "skopeo", name: "skopeo copy docker:// → dir:", compared: "manifest digest and layer file the origin's", fetch: e.skopeoCopy},
		{id: "oras", name: "oras pull (artifact)", compared: "digest and file the origin's", fetch: e.orasPull},
		{id: "helm", name: "helm pull oci://", compared: "digest and chart archive the origin's", fetch: e.helmPull},
	}
}

// proxyEnv is a Go client's environment: a fresh HOME and the proxy.
func proxyEnv(home string, n *nora, extra ...string) []string {
	return cleanEnv(slices.Concat([]string{"HOME=" + home, "HTTPS_PROXY=" + n.proxyURL, "HTTP_PROXY=" + n.proxyURL}, extra)...)
}

// skopeoCopy copies the image into a dir: folder, which keeps the manifest
// byte for byte, and checks its digest and the layer's file.
func (e *ociEnv) skopeoCopy(t *testing.T, n *nora) (clientRun, error) {
	t.Helper()
	dir := e.runDir(t, "skopeo")
	certs := filepath.Join(dir, "certs")
	ca, _ := os.ReadFile(n.caPEM)
	writeFile(t, filepath.Join(certs, "nora-ca.crt"), string(ca))
	out := filepath.Join(dir, "image")
	r := runClient(t, dir, proxyEnv(dir, n), 2*time.Minute, "skopeo", "--insecure-policy", "copy",
		"--src-cert-dir", certs, "docker://registry-a.test:5000/"+imageRepo, "dir:"+out)
	if r.err != nil {
		return r, r.err
	}
	manifest := filepath.Join(out, "manifest.json")
	if d := manifestDigest(t, manifest); d != e.imageDigest {
		return r, fmt.Errorf("manifest digest %s, the origin's is %s", d, e.imageDigest)
	}
	b, _ := os.ReadFile(manifest)
	var m struct {
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(b, &m); err != nil || len(m.Layers) != 1 {
		return r, fmt.Errorf("manifest: %v: %s", err, b)
	}
	body, err := fileInLayer(filepath.Join(out, strings.TrimPrefix(m.Layers[0].Digest, "sha256:")), helloFile)
	if err != nil || body != helloBody {
		return r, fmt.Errorf("layer's %s is %q (%v), the origin's is %q", helloFile, body, err, helloBody)
	}
	return r, nil
}

// orasPull pulls the artifact and checks the digest it reports and the file.
func (e *ociEnv) orasPull(t *testing.T, n *nora) (clientRun, error) {
	t.Helper()
	dir := e.runDir(t, "oras")
	out := filepath.Join(dir, "out")
	r := runClient(t, dir, proxyEnv(dir, n), 2*time.Minute, e.oras, "pull", "--ca-file", n.caPEM, "-o", out,
		"registry-a.test:5000/"+notesRepo)
	if r.err != nil {
		return r, r.err
	}
	if d := lineAfter(r.out, "Digest:"); d != e.notesDigest {
		return r, fmt.Errorf("pulled digest %q, the origin's is %s", d, e.notesDigest)
	}
	if b, err := os.ReadFile(filepath.Join(out, notesFile)); err != nil || string(b) != notesBody {
		return r, fmt.Errorf("%s is %q (%v), the origin's is %q", notesFile, b, err, notesBody)
	}
	return r, nil
}

// helmPull pulls the chart and checks the digest it reports and that the
// archive is the one pushed, byte for byte.
func (e *ociEnv) helmPull(t *testing.T, n *nora) (clientRun, error) {
	t.Helper()
	dir := e.runDir(t, "helm")
	out := filepath.Join(dir, "out")
	// helm pull writes into -d but does not make it.
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	r := runClient(t, dir, proxyEnv(dir, n, helmDirs(dir)...), 2*time.Minute, e.helm, "pull",
		"oci://registry-a.test:5000/charts/"+chartName, "--version", chartVer, "--ca-file", n.caPEM, "-d", out)
	if r.err != nil {
		return r, r.err
	}
	if d := lineAfter(r.out, "Digest:"); d != e.chartDigest {
		return r, fmt.Errorf("pulled digest %q, the origin's is %s", d, e.chartDigest)
	}
	got, err := os.ReadFile(filepath.Join(out, chartName+"-"+chartVer+".tgz"))
	want, _ := os.ReadFile(e.chartTgz)
	if err != nil || !bytes.Equal(got, want) {
		return r, fmt.Errorf("pulled chart archive (%d bytes, %v) differs from the one pushed (%d bytes)", len(got), err, len(want))
	}
	return r, nil
}

// sha256Hex is "sha256:<hex>" of b.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fileInLayer reads one file out of a layer blob (a tar, gzipped or not).
func fileInLayer(blob, name string) (string, error) {
	b, err := os.ReadFile(blob)
	if err != nil {
		return "", err
	}
	var rd io.Reader = bytes.NewReader(b)
	if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		if rd, err = gzip.NewReader(rd); err != nil {
			return "", err
		}
	}
	tr := tar.NewReader(rd)
	for {
		h, err := tr.Next()
		if err != nil {
			return "", fmt.Errorf("%s not in the layer: %w", name, err)
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			body, err := io.ReadAll(tr)
			return string(body), err
		}
	}
}
