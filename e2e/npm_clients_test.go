//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The npm clients besides npm itself, installed by run.sh from the npm
// registry, each in a folder of its own (yarn 1 and yarn 4 both call their
// binary yarn). Each is configured the way its own documentation says,
// with a file in the project, never through another client's settings:
// pnpm 11 and later read only registry and auth settings from .npmrc and
// ignore npm_config_* proxy variables, yarn 1 reads .yarnrc, yarn 4
// .yarnrc.yml.
const (
	pnpmVersion  = "12.4.2"
	yarn1Version = "1.22.22"
	yarn4Version = "4.18.1"
)

// clientSetup is what a client's configuration is written from.
type clientSetup struct {
	tools    string // E2E_WORK, under which run.sh installed the clients
	run      string // this run's folder: HOME, caches and store live here
	app      string // the project folder (run/app), package.json already written
	proxy    string // nora-breaker's proxy URL
	ca       string // its interception CA (PEM), the only root the client trusts
	registry string // the registry URL to configure, "" for the client's default
}

// npmClient is one npm client: how a project is configured for it and
// which lockfile holds the origin's integrity strings ("" when its
// lockfile records a checksum of its own).
type npmClient struct {
	id, name string
	lockfile string
	prepare  func(t *testing.T, c clientSetup) (argv, env []string)
}

// npmClients are pnpm, yarn 1 and yarn 4, in that order.
func npmClients() []npmClient {
	return []npmClient{
		{id: "pnpm", name: "pnpm " + pnpmVersion, lockfile: "pnpm-lock.yaml", prepare: preparePnpm},
		{id: "yarn1", name: "yarn " + yarn1Version, lockfile: "yarn.lock", prepare: prepareYarn1},
		{id: "yarn4", name: "yarn " + yarn4Version, prepare: prepareYarn4},
	}
}

// checkNpmClients fails the test when run.sh installed other versions than
// the ones this file names (both must change together).
func checkNpmClients(t *testing.T, tools string) {
	t.Helper()
	for _, c := range []struct{ dir, pkg, want string }{
		{"pnpm", "pnpm", pnpmVersion}, {"yarn1", "yarn", yarn1Version}, {"yarn4", "@yarnpkg/cli-dist", yarn4Version},
	} {
		b, err := os.ReadFile(filepath.Join(tools, "node-clients", c.dir, "node_modules", c.pkg, "package.json"))
		var m struct{ Version string }
		if err != nil || json.Unmarshal(b, &m) != nil || m.Version != c.want {
			t.Fatalf("%s %s is not installed (found %q, %v): run e2e/run.sh, and keep its pins and npm_clients_test.go's equal",
				c.pkg, c.want, m.Version, err)
		}
	}
}

// clientEnv is a client's environment: a fresh HOME and nothing of the
// caller's proxy, CA, npm, yarn or pnpm settings, nor CI (pnpm and yarn 4
// change their lockfile rules under CI=true).
func clientEnv(c clientSetup) []string {
	var env []string
	for _, kv := range cleanEnv() {
		name := strings.ToUpper(strings.SplitN(kv, "=", 2)[0])
		if name == "CI" || name == "HOME" || strings.HasPrefix(name, "YARN_") || strings.HasPrefix(name, "PNPM_") ||
			strings.HasPrefix(name, "XDG_") || strings.HasPrefix(name, "COREPACK_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+filepath.Join(c.run, "home"))
}

// preparePnpm: registry and CA in the project's .npmrc (the settings pnpm
// still reads there), the proxy, store and cache in pnpm-workspace.yaml,
// no retries (pnpm's back-off would be measured, not the proxy).
func preparePnpm(t *testing.T, c clientSetup) ([]string, []string) {
	rc := "cafile=" + c.ca + "\n"
	if c.registry != "" {
		rc = "registry=" + c.registry + "\n" + rc
	}
	writeFile(t, filepath.Join(c.app, ".npmrc"), rc)
	writeFile(t, filepath.Join(c.app, "pnpm-workspace.yaml"), fmt.Sprintf(
		"httpProxy: %q\nhttpsProxy: %q\nstoreDir: %q\ncacheDir: %q\nfetchRetries: 0\nupdateNotifier: false\n",
		c.proxy, c.proxy, filepath.Join(c.run, "store"), filepath.Join(c.run, "cache")))
	bin := filepath.Join(c.tools, "node-clients", "pnpm", "node_modules", ".bin", "pnpm")
	return []string{bin, "install", "--reporter=append-only", "--no-frozen-lockfile"}, clientEnv(c)
}

// prepareYarn1: everything in the project's .yarnrc.
func prepareYarn1(t *testing.T, c clientSetup) ([]string, []string) {
	rc := fmt.Sprintf("proxy %q\nhttps-proxy %q\ncafile %q\n", c.proxy, c.proxy, c.ca)
	if c.registry != "" {
		rc = fmt.Sprintf("registry %q\n", c.registry) + rc
	}
	writeFile(t, filepath.Join(c.app, ".yarnrc"), rc)
	bin := filepath.Join(c.tools, "node-clients", "yarn1", "node_modules", ".bin", "yarn")
	return []string{bin, "install", "--non-interactive", "--no-progress", "--cache-folder", filepath.Join(c.run, "cache")},
		clientEnv(c)
}

// prepareYarn4: everything in the project's .yarnrc.yml; an empty
// yarn.lock marks the project's root, so yarn never looks further up.
// node_modules linking puts the files where they can be compared; the age
// gate is off, since the test publishes its packages seconds before (yarn
// 4's default quarantines releases younger than a day).
func prepareYarn4(t *testing.T, c clientSetup) ([]string, []string) {
	rc := fmt.Sprintf("httpProxy: %q\nhttpsProxy: %q\nhttpsCaFilePath: %q\nenableGlobalCache: false\ncacheFolder: %q\n"+
		"nodeLinker: node-modules\nenableTelemetry: false\nenableImmutableInstalls: false\nhttpRetry: 0\nnpmMinimalAgeGate: 0\n",
		c.proxy, c.proxy, c.ca, filepath.Join(c.run, "cache"))
	if c.registry != "" {
		rc = fmt.Sprintf("npmRegistryServer: %q\n", strings.TrimSuffix(c.registry, "/")) + rc
	}
	writeFile(t, filepath.Join(c.app, ".yarnrc.yml"), rc)
	writeFile(t, filepath.Join(c.app, "yarn.lock"), "")
	bin := filepath.Join(c.tools, "node-clients", "yarn4", "node_modules", ".bin", "yarn")
	return []string{bin, "install"}, clientEnv(c)
}
