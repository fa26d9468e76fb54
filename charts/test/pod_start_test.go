package charttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestRenderedPodStarts plays the pod's start on this machine: each volume
// is a directory, the CA Secret's files are written as the kubelet does
// with an fsGroup (group-readable), the key copier runs with its rendered
// arguments, and check-config then runs every start-up check serve makes
// on the files the proxy container would see. A Secret mounted straight
// into the proxy would fail here on the key's mode.
func TestRenderedPodStarts(t *testing.T) {
	for _, mode := range []string{"standalone", "nora"} {
		t.Run(mode, func(t *testing.T) {
			r := render(t, "--set", "mode="+mode)
			spec := &r.theDeployment(t).Spec.Template.Spec
			dirs := map[string]string{} // volume name → local directory
			for _, v := range spec.Volumes {
				dirs[v.Name] = filepath.Join(t.TempDir(), v.Name)
				if err := os.MkdirAll(dirs[v.Name], 0o777); err != nil {
					t.Fatal(err)
				}
			}
			sec := r.Secrets[fullname+"-ca"]
			for _, item := range volume(spec, "ca-secret").Secret.Items {
				if err := os.WriteFile(filepath.Join(dirs["ca-secret"], item.Path), sec.Data[item.Key], 0o440); err != nil {
					t.Fatal(err)
				}
			}
			_, copier := findContainer(spec.InitContainers, "ca-key")
			run(t, localPaths(copier, dirs, copier.Args)...)

			_, side := findContainer(append(slices.Clone(spec.InitContainers), spec.Containers...), sidecarName)
			env := []string{}
			for key, path := range map[string]string{"CA_CERT": caCertPath, "CA_KEY": caKeyPath, "STALE_DIR": "/var/cache/nora-breaker"} {
				env = append(env, "NORA_SIDECAR_"+key+"="+localPaths(side, dirs, []string{path})[0])
			}
			out := checkConfig(t, r.ConfigMaps[configMap].Data["config.toml"], env...)
			if !strings.Contains(out, "start-up checks of the files it names: ok") || !strings.Contains(out, "interception: on") {
				t.Errorf("check-config:\n%s", out)
			}
		})
	}
}

// localPaths rewrites the container paths in args to the local directories
// of the volumes mounted there.
func localPaths(c *corev1.Container, dirs map[string]string, args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		for _, m := range c.VolumeMounts {
			if rest, ok := strings.CutPrefix(a, m.MountPath+"/"); ok {
				out[i] = filepath.Join(dirs[m.Name], rest)
			}
		}
	}
	return out
}

// run runs the proxy's binary (go run at the repository root) with args.
func run(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", "."}, args...)...)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nora-breaker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
