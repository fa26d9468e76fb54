//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// containerd is one containerd daemon (Debian's package) that the test
// started with its own root, state, socket and config, pulled from with
// ctr, and stops by its PID. Each daemon starts with an empty content store,
// so a new one is a client with a fresh cache.
type containerd struct {
	proc     *proc
	dir      string
	sock     string
	hostsDir string
	env      []string // ctr's environment
}

// ctrNamespace is the containerd namespace every pull goes to.
const ctrNamespace = "e2e"

// containerdTrust is how a containerd client reaches the registries: through
// nora-breaker, trusting its interception CA for the registry hosts only
// (a certs.d folder per host, as /etc/containerd/certs.d would be), and
// otherwise the system roots plus any extra roots in rootsPEM (the public
// web PKI's stand-in, for hosts the proxy tunnels instead of intercepting).
type containerdTrust struct {
	proxyURL string
	noraCA   string   // interception CA certificate (PEM file)
	hosts    []string // registry hosts the client addresses
	rootsPEM string   // "" or extra roots (PEM file) for SSL_CERT_FILE
}

// startContainerd writes a config under dir (root, state and opt folders;
// the socket under a short temp folder, since a unix socket path is limited
// to 108 bytes), starts the daemon with HTTPS_PROXY in its environment and
// waits until ctr can talk to it.
//
// ctr resolves and fetches images in its own process (the daemon stores
// what it hands over and unpacks it), so ctr gets the proxy settings too;
// the daemon's own HTTPS_PROXY is what its CRI plugin would use, and is set
// the way an operator would set it (a systemd drop-in).
func startContainerd(t *testing.T, dir string, tr containerdTrust) *containerd {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	short, err := os.MkdirTemp("", "e2e-ctd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	c := &containerd{dir: dir, sock: filepath.Join(short, "c.sock"), hostsDir: filepath.Join(dir, "certs.d")}
	cfg := filepath.Join(dir, "containerd.toml")
	writeFile(t, cfg, fmt.Sprintf(`version = 2
root = %q
state = %q
# No Kubernetes here; the snapshotters that need their own block devices or
# kernel modules are not wanted either (overlayfs and native remain).
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(short, "state"), c.sock, c.sock+".ttrpc", filepath.Join(dir, "opt")))

	caPEM, err := os.ReadFile(tr.noraCA)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range tr.hosts {
		// The docker-style certs.d layout: every *.crt in a host's folder is
		// a CA that host's certificates may chain to.
		writeFile(t, filepath.Join(c.hostsDir, h, "ca.crt"), string(caPEM))
	}
	proxyEnv := []string{"HTTPS_PROXY=" + tr.proxyURL, "HTTP_PROXY=" + tr.proxyURL, "HOME=" + dir}
	if tr.rootsPEM != "" {
		proxyEnv = append(proxyEnv, "SSL_CERT_FILE="+tr.rootsPEM)
	}
	c.proc = startProc(t, dir, "containerd", cleanEnv(proxyEnv...), "containerd", "--config", cfg)
	c.env = cleanEnv(proxyEnv...)
	waitFor(t, "containerd to answer on its socket", 30*time.Second, func() bool {
		select {
		case <-c.proc.done:
			t.Fatalf("containerd exited:\n%s", tail(c.proc.logText(), 3000))
		default:
		}
		if _, err := os.Stat(c.sock); err != nil {
			return false
		}
		r := runClient(t, dir, c.env, 10*time.Second, "ctr", "--address", c.sock, "version")
		return r.err == nil && strings.Contains(r.out, "Server:")
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("containerd (%s) log tail:\n%s", dir, tail(c.proc.logText(), 3000))
		}
	})
	return c
}

// pull runs `ctr image pull` of ref (fetch, unpack into overlayfs, record the
// image) through the proxy; user is "user:password" or "" for anonymous.
func (c *containerd) pull(t *testing.T, ref, user string) clientRun {
	t.Helper()
	argv := []string{"ctr", "--address", c.sock, "--namespace", ctrNamespace, "image", "pull",
		"--hosts-dir", c.hostsDir}
	if user != "" {
		argv = append(argv, "--user", user)
	}
	argv = append(argv, ref)
	return runClient(t, c.dir, c.env, 3*time.Minute, argv...)
}

// mustPull is pull that must succeed; it returns the pulled image's
// manifest digest as containerd recorded it.
func (c *containerd) mustPull(t *testing.T, ref, user string) (clientRun, string) {
	t.Helper()
	r := c.pull(t, ref, user)
	if r.err != nil {
		t.Fatalf("ctr image pull %s: %v\n%s", ref, r.err, tail(r.out, 3000))
	}
	return r, c.digest(t, ref)
}

// digest is the manifest digest of the image ref in the daemon's store.
func (c *containerd) digest(t *testing.T, ref string) string {
	t.Helper()
	r := runClient(t, c.dir, c.env, 30*time.Second, "ctr", "--address", c.sock, "--namespace", ctrNamespace,
		"image", "ls")
	for _, line := range strings.Split(r.out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == ref {
			return f[2]
		}
	}
	t.Fatalf("containerd has no image %s:\n%s", ref, r.out)
	return ""
}
