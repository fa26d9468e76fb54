package charttest

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/certs"
)

// TestExistingCARollsOnRenewal: with ca.existingSecret the pod template
// carries a checksum of the Secret's certificate, read from the cluster at
// upgrade (or given as ca.certificate offline), so the first upgrade after
// cert-manager renews the CA rolls the pods onto it and republishes the
// certificate; a generated CA, which never changes, carries none.
func TestExistingCARollsOnRenewal(t *testing.T) {
	if sum := render(t).theDeployment(t).Spec.Template.Annotations["checksum/ca"]; sum != "" {
		t.Errorf("generated CA: checksum/ca %q, want none", sum)
	}
	dir := t.TempDir()
	pem := func(name string) string {
		certPath, _, err := certs.Init(filepath.Join(dir, name), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		return readFile(t, certPath)
	}
	first, renewed := pem("first"), pem("renewed")
	secret := "/api/v1/namespaces/" + namespace + "/secrets/corp-ca"
	upgrade := func(cert string) *rendered {
		c := newFakeCluster(t)
		c.put(secret, map[string]any{"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": "corp-ca", "namespace": namespace},
			"data":     map[string]string{"tls.crt": base64.StdEncoding.EncodeToString([]byte(cert)), "tls.key": "eA=="}})
		out, err := helm(t, c.env(t), "template", release, chartDir, "--namespace", namespace, "--dry-run=server",
			"--kube-version", kubeVersion, "--set", "ca.existingSecret=corp-ca")
		if err != nil {
			t.Fatal(err)
		}
		if !c.asked(secret) {
			t.Fatal("the chart never looked the CA Secret up")
		}
		return decode(t, out)
	}
	a, b := upgrade(first), upgrade(renewed)
	sumA := a.theDeployment(t).Spec.Template.Annotations["checksum/ca"]
	sumB := b.theDeployment(t).Spec.Template.Annotations["checksum/ca"]
	if sumA == "" || sumA == sumB {
		t.Errorf("checksum/ca %q before and %q after the renewal, want two different ones", sumA, sumB)
	}
	if got := b.ConfigMaps[fullname+"-ca-cert"].Data["ca.pem"]; strings.TrimSpace(got) != strings.TrimSpace(renewed) {
		t.Error("the published certificate is not the renewed one")
	}
	if again := upgrade(renewed).theDeployment(t).Spec.Template.Annotations["checksum/ca"]; again != sumB {
		t.Error("checksum/ca changes without a renewal")
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
