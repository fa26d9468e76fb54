//go:build e2e

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The Docker Hub scenario's names, all mapped to loopback by
// [sidecar.resolve] and all served over HTTPS.
const (
	hubHost     = "registry-1.docker.io"
	realmHost   = "auth.docker.io"
	cdnHost     = "production.cloudflare.docker.com"
	mirrorHost  = "mirror.gcr.io"
	storageHost = "storage.googleapis.com"

	hubKey    = "docker:https://" + hubHost
	realmKey  = hubKey + "@" + realmHost
	mirrorKey = "docker:https://" + mirrorHost

	// hubThreshold and hubReset are every case's breaker settings.
	hubThreshold = 2
	hubReset     = 30 * time.Second

	hubPublic  = hubHost + "/library/hello:1"
	hubPrivate = hubHost + "/e2e/private:1"
	alice      = "alice:alice-password-1"
)

// hubEnv is the Docker Hub scenario: the five hosts, each behind a counting
// front and a toxiproxy listener (disabling it makes the host refuse
// connections), and real docker-registry processes behind the two
// registries.
type hubEnv struct {
	s                     suite
	dir, crane            string
	hub                   *hubRegistry
	realm                 *tokenRealm
	cdn, storage          *signedBlobs
	fronts                map[string]*front // by host
	tp                    *toxiproxy
	tox                   map[string]string // host → toxiproxy listener
	upstreamCA, publicPEM string
	publicDigest          string
	privateDigest         string
	privateBlob           string // the private image's layer digest
	ctrs                  int
	// hubAddr and mirrorAddr are the docker-registry processes behind the
	// hub and the mirror (plain HTTP), for scenarios that push more.
	hubAddr, mirrorAddr string
}

// toxName is the toxiproxy proxy of a host.
func toxName(host string) string { return strings.SplitN(host, ".", 2)[0] }

// setupHub starts both registries, pushes the public image (library/hello)
// to the hub and the mirror and the private one (e2e/private, alice's) to
// the hub only, and starts the fronts and toxiproxy. The hub, its realm,
// its storage and the mirror present certificates of a test CA only
// nora-breaker trusts; the mirror's storage host, which nora-breaker has
// no reason to intercept until it learns it, presents one of a second CA
// that clients trust too, as they trust the public web PKI.
func setupHub(t *testing.T, s suite) *hubEnv {
	t.Helper()
	e := &hubEnv{s: s, dir: scenarioDir(t, s), crane: filepath.Join(s.tools, "crane"),
		fronts: map[string]*front{}, tox: map[string]string{}}
	hubReg := startDockerRegistry(t, e.dir, "hub-registry")
	mirrorReg := startDockerRegistry(t, e.dir, "mirror-registry")
	e.hubAddr, e.mirrorAddr = hubReg, mirrorReg
	plain := cleanEnv("HOME=" + e.dir)
	fileLayer(t, filepath.Join(e.dir, "layer.tar"), helloFile, helloBody)
	pushImage(t, e.dir, e.crane, plain, "layer.tar", hubReg+"/library/hello:1")
	fileLayer(t, filepath.Join(e.dir, "private.tar"), "private.txt", "alice's private layer\n")
	pushImage(t, e.dir, e.crane, plain, "private.tar", hubReg+"/e2e/private:1")
	mustRun(t, e.dir, plain, time.Minute, e.crane, "copy", "--insecure", hubReg+"/library/hello:1", mirrorReg+"/library/hello:1")
	e.publicDigest = registryDigest(t, e.dir, e.crane, plain, hubReg+"/library/hello:1")
	e.privateDigest = registryDigest(t, e.dir, e.crane, plain, hubReg+"/e2e/private:1")
	e.privateBlob = layerDigest(t, e.dir, e.crane, plain, hubReg+"/e2e/private:1")

	origin := newNamedCA(t, e.dir, "origin-ca", "nora-breaker e2e origin CA (upstreams only)")
	public := newNamedCA(t, e.dir, "public-ca", "nora-breaker e2e public web PKI")
	e.publicPEM = public.pemPath
	originPEM, _ := os.ReadFile(origin.pemPath)
	publicPEM, _ := os.ReadFile(public.pemPath)
	e.upstreamCA = filepath.Join(e.dir, "upstream-ca.pem")
	writeFile(t, e.upstreamCA, string(originPEM)+string(publicPEM))

	user, pass, _ := strings.Cut(alice, ":")
	e.realm = newTokenRealm(map[string]string{user: pass})
	e.cdn = newSignedBlobs(cdnHost, hubReg, func(d string) string {
		hexd := strings.TrimPrefix(d, "sha256:")
		return "/registry-v2/docker/registry/v2/blobs/sha256/" + hexd[:2] + "/" + hexd + "/data"
	})
	e.storage = newSignedBlobs(storageHost, mirrorReg, func(d string) string {
		return "/artifacts.mirror-gcr.appspot.com/containers/images/" + d
	})
	e.hub = &hubRegistry{realm: e.realm, realmURL: "https://" + realmHost + "/token",
		private: map[string]string{"e2e/private": user}, backend: registryBackend(hubReg), storage: e.cdn}
	handlers := []struct {
		host string
		h    http.Handler
		ca   *originCA
	}{
		{hubHost, e.hub, origin},
		{realmHost, e.realm, origin},
		{cdnHost, e.cdn, origin},
		{mirrorHost, &mirrorRegistry{backend: registryBackend(mirrorReg), storage: e.storage}, origin},
		{storageHost, e.storage, public},
	}
	e.tp = startToxiproxy(t, s, e.dir)
	for _, h := range handlers {
		e.fronts[h.host] = newFront(t, h.host, "", h.h, h.ca.serverTLS(t, h.host))
		e.tox[h.host] = e.tp.proxy(t, toxName(h.host), e.fronts[h.host].addr)
	}
	t.Cleanup(func() {
		// Whatever else failed: the storage hosts must never have been sent
		// a registry token.
		if n := e.cdn.Unexpected.Load() + e.storage.Unexpected.Load(); n != 0 {
			t.Errorf("the storage hosts were sent Authorization %d times", n)
		}
		// Nor a signed URL other than as the registry signed it.
		if n := e.cdn.badSignature.Load() + e.storage.badSignature.Load(); n != 0 {
			t.Errorf("the storage hosts were sent %d URLs with a signature they never made", n)
		}
	})
	return e
}

// startHubNora starts a nora-breaker for one group of cases: docker
// upstreams hub then mirror, with deny_unlisted as given and a stale cache
// when asked. Its folder is a subfolder of the scenario's.
func (e *hubEnv) startHubNora(t *testing.T, name string, denyUnlisted, stale bool) *nora {
	t.Helper()
	resolve := map[string]string{}
	for host, addr := range e.tox {
		resolve[host+":443"] = addr
	}
	return startNora(t, e.s, filepath.Join(e.dir, name), noraOpts{
		formats: breakerTOML(hubThreshold, hubReset, "docker") + `[docker]
proxy_timeout = 5
read_timeout = 5
[[docker.upstreams]]
url = "https://registry-1.docker.io"
[[docker.upstreams]]
url = "https://mirror.gcr.io"
`,
		resolve:       resolve,
		upstreamCA:    e.upstreamCA,
		stale:         stale,
		allowUnlisted: !denyUnlisted,
	})
}

// setDown makes hosts refuse connections (or accept them again).
func (e *hubEnv) setDown(t *testing.T, down bool, hosts ...string) {
	t.Helper()
	for _, h := range hosts {
		e.tp.setEnabled(t, toxName(h), !down)
	}
}

// cranePull pulls ref with crane into a fresh OCI layout through n, with
// alice's credentials when user is set; it returns the run and the pulled
// manifest digest ("" when the pull failed).
func (e *hubEnv) cranePull(t *testing.T, n *nora, ref, user string) (clientRun, string) {
	t.Helper()
	dir, err := os.MkdirTemp(e.dir, "crane-")
	if err != nil {
		t.Fatal(err)
	}
	dockerCfg := filepath.Join(dir, "docker-config")
	auths := "{}"
	if user != "" {
		auths = fmt.Sprintf(`{%q:{"auth":%q}}`, hubHost, base64.StdEncoding.EncodeToString([]byte(user)))
	}
	writeFile(t, filepath.Join(dockerCfg, "config.json"), `{"auths":`+auths+"}\n")
	// crane trusts the interception CA and, like any client, the public
	// web PKI (the mirror's storage may be tunnelled to it).
	bundle := filepath.Join(dir, "roots.pem")
	sys, _ := os.ReadFile(n.bundle)
	pub, _ := os.ReadFile(e.publicPEM)
	writeFile(t, bundle, string(sys)+"\n"+string(pub))
	env := cleanEnv("HOME="+dir, "DOCKER_CONFIG="+dockerCfg, "HTTPS_PROXY="+n.proxyURL, "HTTP_PROXY="+n.proxyURL,
		"SSL_CERT_FILE="+bundle)
	r := runClient(t, dir, env, 2*time.Minute, e.crane, "pull", "--format=oci", ref, "layout")
	if r.err != nil {
		return r, ""
	}
	return r, ociLayoutDigest(t, filepath.Join(dir, "layout"))
}

// ctrPull pulls ref with a new containerd daemon (an empty content store)
// through n; it returns the run and the image's digest ("" on failure).
func (e *hubEnv) ctrPull(t *testing.T, n *nora, ref, user string) (clientRun, string) {
	t.Helper()
	e.ctrs++
	dir := filepath.Join(e.dir, fmt.Sprintf("containerd-%d", e.ctrs))
	roots := filepath.Join(dir, "roots.pem")
	sys, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	pub, _ := os.ReadFile(e.publicPEM)
	writeFile(t, roots, string(sys)+"\n"+string(pub))
	c := startContainerd(t, dir, containerdTrust{proxyURL: n.proxyURL, noraCA: n.caPEM, hosts: []string{hubHost}, rootsPEM: roots})
	defer c.proc.stop()
	r := c.pull(t, ref, user)
	if r.err != nil {
		return r, ""
	}
	return r, c.digest(t, ref)
}

// hubClient is one client of the scenario and how it pulls.
type hubClient struct {
	name string
	pull func(t *testing.T, n *nora, ref, user string) (clientRun, string)
}

// clients are crane, then containerd.
func (e *hubEnv) clients() []hubClient {
	return []hubClient{{"crane", e.cranePull}, {"containerd", e.ctrPull}}
}

// pullWant pulls ref with c and reports (t.Errorf, so the case goes on
// and shows everything that is wrong) a failed pull or a digest other
// than want; it returns the run.
func (e *hubEnv) pullWant(t *testing.T, n *nora, c hubClient, ref, user, want, what string) clientRun {
	t.Helper()
	r, d := c.pull(t, n, ref, user)
	if d != want {
		t.Errorf("%s: %s pull of %s: got digest %q, want %s (%v)\n%s", what, c.name, ref, d, want, r.err, tail(r.out, 3000))
	}
	return r
}

// pullsOK pulls the public image with crane and with containerd; both
// must succeed with the hub's digest. It returns both runs' wall time.
func (e *hubEnv) pullsOK(t *testing.T, n *nora, what string) time.Duration {
	t.Helper()
	var wall time.Duration
	for _, c := range e.clients() {
		wall += e.pullWant(t, n, c, hubPublic, "", e.publicDigest, what).wall
	}
	if t.Failed() {
		t.FailNow()
	}
	return wall
}

// seen is every front's counters.
func (e *hubEnv) seen() string {
	var parts []string
	for _, h := range []string{hubHost, realmHost, cdnHost, mirrorHost, storageHost} {
		parts = append(parts, e.fronts[h].seen())
	}
	return strings.Join(parts, " ")
}

// manifestsAtHub counts the manifest requests that reached the hub.
func (e *hubEnv) manifestsAtHub() int { return len(e.fronts[hubHost].pathsMatching("/manifests/")) }

// untouched fails unless key's breaker is closed with no failure counted.
func untouched(t *testing.T, n *nora, key, when string) {
	t.Helper()
	if b := n.breaker(t, key); b.State != "closed" || b.FailureCount != 0 {
		t.Fatalf("%s: breaker %s is %s with %d failures, want closed and untouched", when, key, b.State, b.FailureCount)
	}
}

// TestDockerHub: crane and containerd pull Docker Hub-shaped images through
// the intercepting proxy — a token realm, blobs redirected to signed
// storage URLs, a mirror whose blobs live on a storage host nobody
// configured — healthy, with the hub refusing connections, with the hub
// throttling manifests (429), both under deny_unlisted, and with every
// host down (stale copies; a private image stays private).
func TestDockerHub(t *testing.T) {
	e := setupHub(t, loadSuite(t))
	all := []string{hubHost, realmHost, cdnHost, mirrorHost, storageHost}

	// a and e share one proxy with a stale cache: e pulls what a pulled.
	stale := e.startHubNora(t, "nora-stale", false, true)
	t.Run("a-healthy", func(t *testing.T) { hubHealthy(t, e, stale) })
	t.Run("e-everything-down-stale", func(t *testing.T) {
		e.setDown(t, true, all...)
		defer e.setDown(t, false, all...)
		hubFromStale(t, e, stale)
	})
	stale.proc.stop()

	t.Run("b-hub-refusing", func(t *testing.T) {
		n := e.startHubNora(t, "nora-hub-down", false, false)
		defer n.proc.stop()
		hubRefusing(t, e, n, "registry-1.docker.io refusing connections")
	})
	t.Run("c-hub-throttled", func(t *testing.T) {
		n := e.startHubNora(t, "nora-throttled", false, false)
		defer n.proc.stop()
		hubThrottled(t, e, n, "hub answering 429 TOOMANYREQUESTS (Retry-After: 60) on manifests")
	})
	// d: under deny_unlisted the mirror's storage host, configured nowhere,
	// is allowed only because the mirror's 307s named it. Once with the hub
	// refusing connections (learned hosts alone), once throttled as in c.
	t.Run("d1-hub-refusing-deny-unlisted", func(t *testing.T) {
		n := e.startHubNora(t, "nora-deny-down", true, false)
		defer n.proc.stop()
		hubRefusing(t, e, n, "registry-1.docker.io refusing connections, deny_unlisted = true")
		storageLearned(t, n)
	})
	t.Run("d2-hub-throttled-deny-unlisted", func(t *testing.T) {
		n := e.startHubNora(t, "nora-deny-throttled", true, false)
		defer n.proc.stop()
		hubThrottled(t, e, n, "hub answering 429 on manifests, deny_unlisted = true")
		storageLearned(t, n)
	})
}

// storageLearned fails when the proxy refused anything (under
// deny_unlisted: the storage host was not learned from the mirror's 307).
func storageLearned(t *testing.T, n *nora) {
	t.Helper()
	if d := n.metric(t, "nora_sidecar_requests_total", `result="denied"`); d != 0 {
		t.Fatalf("%v requests denied: the storage host the mirror redirects to was not learned", d)
	}
}

// hubHealthy is case a: public and private pulls by both clients, the
// anonymous pull of the private image refused by the hub itself.
func hubHealthy(t *testing.T, e *hubEnv, n *nora) {
	start := time.Now()
	wall := e.pullsOK(t, n, "healthy")
	for _, c := range e.clients() {
		wall += e.pullWant(t, n, c, hubPrivate, alice, e.privateDigest, "healthy, alice").wall
	}
	if t.Failed() {
		t.FailNow()
	}
	// Anonymous: the realm gives a token, the hub refuses it for this
	// repository. The proxy has now seen an anonymous token request for
	// the private scope, which case e relies on.
	if r, d := e.cranePull(t, n, hubPrivate, ""); d != "" || !strings.Contains(r.out, "UNAUTHORIZED") {
		t.Fatalf("anonymous pull of %s: want the hub's UNAUTHORIZED, got digest %q:\n%s", hubPrivate, d, tail(r.out, 2000))
	}
	if len(e.fronts[hubHost].pathsMatching("HEAD /v2/library/hello/manifests/")) == 0 {
		t.Fatal("containerd sent the hub no manifest HEAD")
	}
	if e.cdn.served.Load() == 0 || e.realm.withCredentials.Load() < 2 || e.realm.anonymous.Load() == 0 {
		t.Fatalf("healthy pulls: %d blobs from the CDN, %d tokens with credentials, %d anonymous",
			e.cdn.served.Load(), e.realm.withCredentials.Load(), e.realm.anonymous.Load())
	}
	if r, _ := e.fronts[mirrorHost].count(); r != 0 {
		t.Fatalf("healthy pulls reached the mirror (%d requests)", r)
	}
	untouched(t, n, hubKey, "after healthy pulls")
	untouched(t, n, realmKey, "after healthy pulls")
	if tr := n.metric(t, "nora_circuit_breaker_transitions_total", fmt.Sprintf("registry=%q", hubKey)); tr != 0 {
		t.Fatalf("healthy pulls: %v transitions of %s", tr, hubKey)
	}
	summary("crane + containerd (Docker Hub shape: token realm, blobs 307 to signed CDN URLs)", "none",
		fmt.Sprintf("public and private (alice) pulls ok by both clients; anonymous private pull refused by the hub; hub and realm breakers untouched (%.1fs)",
			time.Since(start).Seconds()), wall, e.seen())
}

// hubFromStale is case e: every registry, realm and storage host refuses
// connections. Fresh pulls of what case a pulled succeed from stale copies
// with the same digests; alice's private image is served to alice (crane,
// Basic credentials on the token request) and to nobody else.
func hubFromStale(t *testing.T, e *hubEnv, n *nora) {
	// Every check here stands on its own: each failure is reported and
	// the case goes on, so one run shows what the proxy does in all of them.
	// The hosts refuse connections at toxiproxy, so their fronts see
	// nothing: what is counted is nora's own attempts, which its breakers
	// must cut off after failure_threshold each.
	keys := n.breakers(t)
	before := map[string]int64{}
	for _, b := range keys {
		before[b.Key] = attemptsOf(t, n, b.Key)()
	}
	start := time.Now()
	var wall time.Duration
	for _, c := range e.clients() {
		wall += e.pullWant(t, n, c, hubPublic, "", e.publicDigest, "everything down").wall
	}
	wall += e.pullWant(t, n, e.clients()[0], hubPrivate, alice, e.privateDigest, "everything down, alice").wall
	for _, c := range e.clients() {
		if r, d := c.pull(t, n, hubPrivate, ""); d != "" {
			t.Errorf("everything down: anonymous %s pull of %s was served (digest %s):\n%s", c.name, hubPrivate, d, tail(r.out, 2000))
		}
	}
	if status, body := noraGet(t, n, "https://"+hubHost+"/v2/e2e/private/manifests/1"); status == http.StatusOK || strings.Contains(body, "layers") {
		t.Errorf("everything down: the private manifest was served to a request without credentials: %d %s", status, body)
	}
	// Blobs are kept by digest whichever client fetched them (crane with a
	// Basic token request, containerd with an OAuth2 POST): the private
	// layer must not be served to someone who merely knows its digest.
	if status, body := noraGet(t, n, "https://"+hubHost+"/v2/e2e/private/blobs/"+e.privateBlob); status == http.StatusOK {
		t.Errorf("everything down: the private layer was served to a request without credentials (%d bytes)", len(body))
	}
	if n.metric(t, "nora_sidecar_stale_served_total", fmt.Sprintf("registry=%q", hubKey)) == 0 {
		t.Error("no stale copy counted as served for the hub")
	}
	for _, b := range keys {
		triedAtMost(t, b.Key, attemptsOf(t, n, b.Key)()-before[b.Key], hubThreshold, hubReset, start)
	}
	if t.Failed() {
		return
	}
	summary("crane + containerd, fresh caches", "every registry, realm and storage host refusing connections",
		"public image by both clients and alice's private image (crane) from stale copies, digests match; the private image refused to anonymous crane, containerd and bare manifest and blob requests",
		wall, e.seen())
}

// hubRefusing is case b: the hub refuses connections, the mirror serves,
// its blobs from the storage host it redirects to.
func hubRefusing(t *testing.T, e *hubEnv, n *nora, fault string) {
	e.setDown(t, true, hubHost)
	defer e.setDown(t, false, hubHost)
	mirror0, _ := e.fronts[mirrorHost].count()
	storage0 := e.storage.served.Load()
	wall := e.pullsOK(t, n, fault)
	if m, _ := e.fronts[mirrorHost].count(); m == mirror0 || e.storage.served.Load() == storage0 {
		t.Fatal("the pulls were not served by the mirror and its storage")
	}
	if n.state(t, hubKey) != 1 {
		t.Fatal("the hub's breaker did not open while it refused connections")
	}
	if n.metric(t, "nora_sidecar_fallback_total", fmt.Sprintf("from=%q", hubKey), fmt.Sprintf("to=%q", mirrorKey)) == 0 {
		t.Fatal("no fallback counted from the hub to the mirror")
	}
	summary("crane + containerd", fault,
		fmt.Sprintf("both pulls served by mirror.gcr.io, blobs via storage.googleapis.com (%d blobs); hub breaker open",
			e.storage.served.Load()-storage0), wall, e.seen())
}

// hubThrottled is cases c and d: the hub answers manifests with 429. The
// first manifest request meets it; from then on the hub is throttled and
// sees no manifest request at all, both pulls are served by the mirror, and
// the hub's breaker does not move (a 429 is no failure).
func hubThrottled(t *testing.T, e *hubEnv, n *nora, fault string) {
	e.hub.Throttled.Store(true)
	defer e.hub.Throttled.Store(false)
	manifests0, answers0 := e.manifestsAtHub(), e.hub.throttledAnswers.Load()
	storage0 := e.storage.served.Load()
	wall := e.pullsOK(t, n, fault)
	if got := e.manifestsAtHub() - manifests0; got != 1 || e.hub.throttledAnswers.Load()-answers0 != 1 {
		t.Fatalf("%s: the hub saw %d manifest requests (%d answered 429), want exactly the first, which met the 429",
			fault, got, e.hub.throttledAnswers.Load()-answers0)
	}
	if e.storage.served.Load() == storage0 {
		t.Fatalf("%s: no blob came from the mirror's storage", fault)
	}
	untouched(t, n, hubKey, fault)
	if !n.breaker(t, hubKey).Throttled {
		t.Fatalf("%s: /breakers does not show the hub throttled", fault)
	}
	if v := n.metric(t, "nora_upstream_throttled", fmt.Sprintf("registry=%q", hubKey)); v != 1 {
		t.Fatalf("%s: nora_upstream_throttled for the hub is %v, want 1", fault, v)
	}
	summary("crane + containerd", fault,
		fmt.Sprintf("both pulls served by the mirror (blobs via %s); the hub saw 1 manifest request (the 429), none while throttled; its breaker untouched", storageHost),
		wall, e.seen())
}

// noraGet sends one GET through n's proxy with no credentials, trusting its
// interception CA, and returns the status and up to 64 KiB of the body.
func noraGet(t *testing.T, n *nora, target string) (int, string) {
	t.Helper()
	pem, err := os.ReadFile(n.caPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	proxy, _ := url.Parse(n.proxyURL)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodGet, target, nil)
	req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body)
}
