//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// reactionClient is one row of TestClientReactions: a client with its
// default retry settings (unless its name says otherwise), run in a fresh
// folder with a fresh cache against the bench's upstream of its format.
type reactionClient struct {
	name    string
	hosts   []string // the upstream hosts it addresses, as host:port
	version []string // argv that prints its version; nil for the in-process client
	run     clientRunner
	// failed tells from a finished run that the client did not get what it
	// asked for; nil means a non-zero exit.
	failed func(clientRun) bool
	// longFor lists the answer statuses whose reaction takes a minute or
	// more whatever the Retry-After says (the client's own back-off, which
	// the full run measures); the short run skips them.
	longFor []int
}

// clientRunner runs a client once in dir, against bench b, bounded by limit.
type clientRunner func(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun

// reactionClients lists every client the project supports. The Node
// clients pnpm and yarn come from e2e/run.sh (install_node_clients) under
// $E2E_WORK/node-clients; crane from $E2E_TOOLS; the rest from the system.
func reactionClients(s suite) []reactionClient {
	py := pythonExecutable()
	pnpm := filepath.Join(s.work, "node-clients", "pnpm", "node_modules", ".bin", "pnpm")
	yarn1 := filepath.Join(s.work, "node-clients", "yarn1", "node_modules", ".bin", "yarn")
	yarn4 := filepath.Join(s.work, "node-clients", "yarn4", "node_modules", "@yarnpkg", "cli-dist", "bin", "yarn.js")
	crane := filepath.Join(s.tools, "crane")
	both := []int{http.StatusServiceUnavailable, http.StatusTooManyRequests}
	rc := func(name string, hosts, version []string, run clientRunner) reactionClient {
		return reactionClient{name: name, hosts: hosts, version: version, run: run}
	}
	return []reactionClient{
		rc("pip", []string{rxPypi}, []string{py, "-m", "pip", "--version"}, pipRun(py)),
		rc("pip --retries 0", []string{rxPypi}, []string{py, "-m", "pip", "--version"}, pipRun(py, "--retries", "0")),
		// npm and pnpm back off 10 s, then 60 s, from any 5xx or 429.
		{name: "npm", hosts: []string{rxNpm}, version: []string{"npm", "--version"}, run: npmRun(), longFor: both},
		rc("npm --fetch-retries 0", []string{rxNpm}, []string{"npm", "--version"}, npmRun("--fetch-retries", "0")),
		{name: "pnpm", hosts: []string{rxNpm}, version: []string{pnpm, "--version"}, run: pnpmRun(pnpm), longFor: both},
		rc("yarn 1", []string{rxNpm}, []string{yarn1, "--version"}, yarn1Run(yarn1)),
		rc("yarn 4", []string{rxNpm}, []string{"node", yarn4, "--version"}, yarn4Run(yarn4)),
		// Maven's HTTP transport backs off from a 429 by itself, 5 s doubling
		// up to 160 s: five minutes and more per artifact.
		{name: "mvn", hosts: []string{rxMaven}, version: []string{"mvn", "-v"}, run: mvnRun,
			longFor: []int{http.StatusTooManyRequests}},
		rc("go", []string{rxGo}, []string{"go", "version"}, goRun),
		rc("cargo", []string{rxIndex, rxStatic}, []string{"cargo", "--version"}, cargoRun),
		rc("crane", []string{rxRegistry}, []string{crane, "version"}, craneRun(crane)),
		rc("skopeo", []string{rxRegistry}, []string{"skopeo", "--version"}, skopeoRun),
		rc("ctr (containerd)", []string{rxRegistry}, []string{"ctr", "--version"}, ctrRun),
		// apt-get update exits 0 when an index could not be fetched: it
		// warns and goes on without it.
		{name: "apt-get", hosts: []string{rxDeb}, version: []string{"apt-get", "--version"}, run: aptRun,
			failed: func(r clientRun) bool { return r.err != nil || strings.Contains(r.out, "Failed to fetch") }},
		rc("Go net/http", []string{rxPypi}, nil, goHTTPRun),
	}
}

// selectClients keeps the clients named in list (comma-separated), or all.
func selectClients(t *testing.T, all []reactionClient, list string) []reactionClient {
	t.Helper()
	if list == "" {
		return all
	}
	var out []reactionClient
	for _, name := range strings.Split(list, ",") {
		found := false
		for _, c := range all {
			if c.name == strings.TrimSpace(name) {
				out, found = append(out, c), true
			}
		}
		if !found {
			t.Fatalf("E2E_REACTIONS_CLIENTS: no client %q", name)
		}
	}
	return out
}

// clientVersions asks each client for its version once; a client that
// cannot say is not installed, and fails the test: run.sh installs them.
func clientVersions(t *testing.T, s suite, clients []reactionClient) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range clients {
		if c.version == nil {
			out[c.name] = strings.TrimPrefix(runtime.Version(), "go")
			continue
		}
		r := runClient(t, s.work, cleanEnv("HOME="+s.work, "RUSTUP_HOME="+rustupHome()), 2*time.Minute, c.version...)
		if r.err != nil {
			t.Fatalf("%s is not installed (%v): %s", c.name, r.err, tail(r.out, 500))
		}
		out[c.name] = versionOf(r.out)
	}
	return out
}

// versionOf picks the first version number out of a client's version
// output (terminal colour codes and all).
func versionOf(out string) string {
	if v := regexp.MustCompile(`[0-9]+\.[0-9]+[0-9A-Za-z.~+-]*`).FindString(out); v != "" {
		return v
	}
	return strings.TrimSpace(out)
}

// pythonExecutable is the interpreter behind python3 (a pyenv shim alone
// can cost seconds per run).
func pythonExecutable() string {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "python3"
	}
	return strings.TrimSpace(string(out))
}

// pipRun is pip download of one distribution from the bench's index, with
// no cache and extra pip arguments.
func pipRun(py string, extra ...string) clientRunner {
	return func(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
		argv := append([]string{py, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
			"--disable-pip-version-check", "--trusted-host", "pypi-a.test", "--index-url", "http://" + rxPypi + "/simple/",
			"--proxy", b.proxy.url, "-d", filepath.Join(dir, "out")}, extra...)
		argv = append(argv, "e2e-hello==0.1.0")
		return runClient(t, dir, cleanEnv("HOME="+dir, "PIP_CONFIG_FILE=/dev/null"), limit, argv...)
	}
}

// nodeProject writes a project that depends on e2e-hello 1.0.0.
func nodeProject(t *testing.T, dir string) string {
	t.Helper()
	app := filepath.Join(dir, "app")
	writeFile(t, filepath.Join(app, "package.json"),
		`{"name":"e2e-app","version":"1.0.0","private":true,"dependencies":{"e2e-hello":"1.0.0"}}`+"\n")
	return app
}

// nodeEnv is a Node client's environment: its own HOME (no user config),
// and not CI, which makes pnpm and yarn 4 refuse to write a lockfile.
func nodeEnv(dir string) []string {
	var env []string
	for _, kv := range cleanEnv("HOME="+dir, "npm_config_update_notifier=false") {
		if !strings.HasPrefix(kv, "CI=") {
			env = append(env, kv)
		}
	}
	return env
}

// npmRun is npm install with a fresh cache and extra npm arguments.
func npmRun(extra ...string) clientRunner {
	return func(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
		app := nodeProject(t, dir)
		argv := append([]string{"npm", "install", "--registry", "http://" + rxNpm + "/", "--proxy", b.proxy.url,
			"--https-proxy", b.proxy.url, "--cache", filepath.Join(dir, "cache"), "--no-audit", "--no-fund"}, extra...)
		return runClient(t, app, nodeEnv(dir), limit, argv...)
	}
}

// pnpmRun is pnpm install, configured through the project's .npmrc.
func pnpmRun(pnpm string) clientRunner {
	return func(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
		app := nodeProject(t, dir)
		writeFile(t, filepath.Join(app, ".npmrc"), fmt.Sprintf(
			"registry=http://%s/\nproxy=%s\nhttps-proxy=%s\nstore-dir=%s\ncache-dir=%s\nupdate-notifier=false\n",
			rxNpm, b.proxy.url, b.proxy.url, filepath.Join(dir, "store"), filepath.Join(dir, "cache")))
		return runClient(t, app, nodeEnv(dir), limit, pnpm, "install", "--no-frozen-lockfile", "--reporter=append-only")
	}
}

// yarn1Run is yarn 1 install, configured through the project's .yarnrc.
func yarn1Run(yarn string) clientRunner {
	return func(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
		app := nodeProject(t, dir)
		writeFile(t, filepath.Join(app, ".yarnrc"), fmt.Sprintf(
			"registry \"http://%s/\"\nproxy %q\nhttps-proxy %q\ndisable-self-update-check true\n",
			rxNpm, b.proxy.url, b.proxy.url))
		return runClient(t, app, nodeEnv(dir), limit, yarn, "install", "--non-interactive",
			"--cache-folder", filepath.Join(dir, "cache"))
	}
}

// yarn4Run is yarn 4 install, configured through the project's .yarnrc.yml
// (an empty yarn.lock marks the project's root).
func yarn4Run(yarnJS string) clientRunner {
	return func(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
		app := nodeProject(t, dir)
		writeFile(t, filepath.Join(app, "yarn.lock"), "")
		writeFile(t, filepath.Join(app, ".yarnrc.yml"), fmt.Sprintf(`npmRegistryServer: "http://%s"
unsafeHttpWhitelist: ["npm-a.test"]
httpProxy: %q
httpsProxy: %q
enableGlobalCache: false
cacheFolder: %q
nodeLinker: node-modules
enableTelemetry: false
`, rxNpm, b.proxy.url, b.proxy.url, filepath.Join(dir, "cache")))
		env := append(nodeEnv(dir), "YARN_ENABLE_IMMUTABLE_INSTALLS=false")
		return runClient(t, app, env, limit, "node", yarnJS, "install")
	}
}

// mvnRun is mvn dependency:get with an empty local repository: artifacts
// from the bench's repository (overriding central) through the proxy,
// plugins from Debian's folder (Maven Central is out of reach).
func mvnRun(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
	settings := filepath.Join(dir, "settings.xml")
	writeFile(t, settings, fmt.Sprintf(`<settings>
  <proxies><proxy><id>nora-breaker</id><active>true</active><protocol>http</protocol>
    <host>127.0.0.1</host><port>%s</port></proxy></proxies>
  <profiles><profile><id>bench</id>
    <repositories><repository><id>central</id><url>http://%s/</url></repository></repositories>
    <pluginRepositories><pluginRepository><id>central</id><url>file://%s</url></pluginRepository></pluginRepositories>
  </profile></profiles>
  <activeProfiles><activeProfile>bench</activeProfile></activeProfiles>
</settings>
`, b.proxy.port, rxMaven, debianMavenRepo))
	// The empty global settings drop Maven's default blocker of http:// repositories.
	global := filepath.Join(dir, "global-settings.xml")
	writeFile(t, global, "<settings/>\n")
	return runClient(t, dir, cleanEnv("HOME="+dir), limit, "mvn", "-B", "-s", settings, "-gs", global,
		"-Dmaven.repo.local="+filepath.Join(dir, "m2"),
		"org.apache.maven.plugins:maven-dependency-plugin:3.5.0:get", "-Dartifact=e2e.nora:hello:1.0", "-Dtransitive=false")
}

// goRun is go mod download with an empty module cache, GOPROXY the bench's
// module proxy.
func goRun(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
	env := cleanEnv("HOME="+dir, "GOPROXY=http://"+rxGo, "GOSUMDB=off", "GONOSUMDB=*",
		"GOFLAGS=-mod=mod -modcacherw", "GOTOOLCHAIN=local", "GOMODCACHE="+filepath.Join(dir, "modcache"),
		"GOPATH="+filepath.Join(dir, "gopath"), "HTTP_PROXY="+b.proxy.url, "HTTPS_PROXY="+b.proxy.url)
	return runClient(t, dir, env, limit, "go", "mod", "download", "-json", "example.test/mod@v0.1.0")
}

// cargoRun is cargo fetch of a project with one crates.io dependency, a
// fresh CARGO_HOME, crates.io's sparse index through the intercepting proxy,
// and cargo's own retry settings.
func cargoRun(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
	home := filepath.Join(dir, "cargo-home")
	writeFile(t, filepath.Join(home, "config.toml"), fmt.Sprintf(`[http]
proxy = %q
cainfo = %q
[registries.crates-io]
protocol = "sparse"
`, b.proxy.url, b.proxy.caPEM))
	project := filepath.Join(dir, "project")
	writeFile(t, filepath.Join(project, "Cargo.toml"), fmt.Sprintf(
		"[package]\nname = \"e2e-app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n%s = %q\n", crateName, crateVersion))
	writeFile(t, filepath.Join(project, "src", "lib.rs"), "")
	env := cleanEnv("HOME="+dir, "CARGO_HOME="+home, "RUSTUP_HOME="+rustupHome(), "CARGO_TERM_COLOR=never")
	return runClient(t, project, env, limit, "cargo", "fetch", "-v")
}

// rustupHome is where cargo (a rustup proxy here) finds its toolchain; it
// must not follow HOME into a client's fresh folder.
func rustupHome() string {
	if h := os.Getenv("RUSTUP_HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return filepath.Join(h, ".rustup")
}

// reactionImage is the image the docker clients ask the bench's registry for.
const reactionImage = rxRegistry + "/e2e/hello:1"

// craneRun is crane pull through the intercepting proxy.
func craneRun(crane string) clientRunner {
	return func(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
		env := cleanEnv("HOME="+dir, "HTTPS_PROXY="+b.proxy.url, "HTTP_PROXY="+b.proxy.url, "SSL_CERT_FILE="+b.proxy.bundle)
		return runClient(t, dir, env, limit, crane, "pull", reactionImage, filepath.Join(dir, "image.tar"))
	}
}

// skopeoRun is skopeo inspect through the intercepting proxy, trusting the
// interception CA from a certificate folder.
func skopeoRun(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
	certs := filepath.Join(dir, "certs")
	ca, err := os.ReadFile(b.proxy.caPEM)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(certs, "nora-ca.crt"), string(ca))
	env := cleanEnv("HOME="+dir, "HTTPS_PROXY="+b.proxy.url, "HTTP_PROXY="+b.proxy.url)
	return runClient(t, dir, env, limit, "skopeo", "--insecure-policy", "inspect", "--cert-dir", certs,
		"docker://"+reactionImage)
}

// ctrRun is ctr image pull through the intercepting proxy, against a
// containerd daemon of the bench's own, started on first use.
func ctrRun(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
	b.ctdOnce.Do(func() {
		b.ctd = startContainerd(t, filepath.Join(b.dir, "containerd"), containerdTrust{proxyURL: b.proxy.url,
			noraCA: b.proxy.caPEM, hosts: []string{rxRegistry}})
	})
	argv := []string{"ctr", "--address", b.ctd.sock, "--namespace", ctrNamespace, "image", "pull",
		"--hosts-dir", b.ctd.hostsDir, reactionImage}
	return runClient(t, dir, b.ctd.env, limit, argv...)
}

// aptRun is apt-get update of the bench's repository with apt's default
// retries, its own configuration, state and cache.
func aptRun(t *testing.T, b *reactionBench, dir string, limit time.Duration) clientRun {
	empty := filepath.Join(dir, "empty.d")
	state, cache := filepath.Join(dir, "state"), filepath.Join(dir, "cache")
	for _, d := range []string{empty, filepath.Join(state, "lists", "partial"), filepath.Join(cache, "archives", "partial")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "dpkg-status"), "")
	conf := filepath.Join(dir, "apt.conf")
	writeFile(t, conf, fmt.Sprintf(`Dir::Etc::Parts %[1]q;
Dir::Etc::SourceParts %[1]q;
Dir::Etc::PreferencesParts %[1]q;
Dir::Etc::TrustedParts %[1]q;
Dir::State::status %[2]q;
Acquire::Languages "none";
APT::Sandbox::User "root";
`, empty, filepath.Join(dir, "dpkg-status")))
	sources := filepath.Join(dir, "sources.list")
	writeFile(t, sources, "deb [trusted=yes] http://"+rxDeb+"/debian stable main\n")
	return runClient(t, dir, cleanEnv("APT_CONFIG="+conf, "DEBIAN_FRONTEND=noninteractive"), limit,
		"apt-get", "-q", "-o", "Dir::State="+state, "-o", "Dir::Cache="+cache,
		"-o", "Dir::Etc::SourceList="+sources, "-o", "Acquire::http::Proxy="+b.proxy.url, "update")
}

// plainGoClient is a Go net/http client through the proxy, with the
// standard library's defaults otherwise: what a Go service (or NORA's own
// upstream client in spirit) does with a status.
func plainGoClient(proxy string) *http.Client {
	u, _ := url.Parse(proxy)
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
}

// goHTTPRun is one GET of the bench's PyPI page with a plain Go client: it
// has no retry of its own, so what it sends is one request.
func goHTTPRun(t *testing.T, b *reactionBench, _ string, _ time.Duration) clientRun {
	start := time.Now()
	resp, err := plainGoClient(b.proxy.url).Get("http://" + rxPypi + "/simple/e2e-hello/")
	r := clientRun{err: err}
	if err == nil {
		resp.Body.Close()
		r.out = fmt.Sprintf("%s Retry-After: %s", resp.Status, resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusOK {
			r.err = fmt.Errorf("status %s", resp.Status)
		}
	}
	r.wall = time.Since(start)
	return r
}
