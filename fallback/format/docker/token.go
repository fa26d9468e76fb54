package docker

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/destination"
)

// errBadRealm reports a token realm we refuse to contact: not http(s), or an
// address that reaches the host itself (link-local, cloud metadata,
// unspecified). The realm comes from an upstream's 401, so an upstream could
// otherwise point the proxy, with credentials, at anything.
var errBadRealm = errors.New("refused token realm")

const (
	// defaultTokenLifetime applies when the token answer has no expires_in,
	// as the docker token spec prescribes.
	defaultTokenLifetime = 60 * time.Second
	// maxTokenLifetime caps expires_in so a huge value cannot overflow a
	// time.Duration or pin a token for days.
	maxTokenLifetime = 24 * time.Hour
	// maxTokenMargin is the most we shave off a lifetime so a token is not
	// used in its last moments, while in flight to the upstream.
	maxTokenMargin = 30 * time.Second
	// maxTokenBody bounds how much of a token answer we read.
	maxTokenBody = 1 << 20
	// tokenFetchTimeout bounds one fetch; the fetch runs detached from the
	// caller that started it because other callers may be waiting on it.
	tokenFetchTimeout = 30 * time.Second
	defaultMaxTokens  = 4096
)

// TokenOptions configures a TokenSource. Zero values mean: Client — a plain
// client that ignores the environment's proxy settings; Now — time.Now;
// MaxEntries — 4096.
type TokenOptions struct {
	// Client is the proxy's upstream client. Its redirects are additionally
	// checked against the same realm rules as the realm itself.
	Client *http.Client
	// Now is the clock deciding when cached tokens expire.
	Now func() time.Time
	// MaxEntries bounds the token cache.
	MaxEntries int
	// Breakers, when set, admit and judge each fetch from a realm whose host
	// has a breaker (Token's realmKey): a dead realm is skipped once its
	// breaker opens instead of costing every fallback request a timeout.
	Breakers *breakerstate.Set
}

// TokenSource fetches docker registry bearer tokens for substituted
// upstreams and caches them per (upstream, realm, service, scopes) until
// shortly before they expire. It is safe for concurrent use. It never logs.
type TokenSource struct {
	client     *http.Client
	breakers   *breakerstate.Set
	now        func() time.Time
	maxEntries int
	group      singleflight.Group

	mu    sync.Mutex
	cache map[string]tokenEntry
}

type tokenEntry struct {
	token   string
	expires time.Time
	// authSum tells tokens fetched with different credentials apart without
	// keeping the credentials themselves in the key.
	authSum [sha256.Size]byte
}

// tokenAnswer is the JSON a token realm returns.
type tokenAnswer struct {
	Token       string `json:"token"`
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
}

// NewTokenSource returns a TokenSource configured by o.
func NewTokenSource(o TokenOptions) *TokenSource {
	ts := &TokenSource{client: o.Client, breakers: o.Breakers, now: o.Now, maxEntries: o.MaxEntries,
		cache: map[string]tokenEntry{}}
	if ts.client == nil {
		ts.client = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: tokenFetchTimeout}
	}
	if ts.now == nil {
		ts.now = time.Now
	}
	if ts.maxEntries <= 0 {
		ts.maxEntries = defaultMaxTokens
	}
	return ts
}

// Token returns a bearer token for upstreamKey answering ch, from the cache
// while it is fresh, else fetched from ch.Realm through rt (nil: the
// TokenSource's own client) with Basic credentials auth ("user:pass") when
// auth is not empty. realmKey, when not "", is the breaker key of the
// realm's host: it admits the fetch and learns its outcome. Concurrent misses
// for the same key share one fetch (and one report); failures are not
// cached.
func (ts *TokenSource) Token(ctx context.Context, rt http.RoundTripper, upstreamKey, auth string, ch Challenge,
	realmKey string) (string, error) {
	realm, err := checkRealm(ch.Realm)
	if err != nil {
		return "", fmt.Errorf("upstream %s: %w", upstreamKey, err)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("upstream %s: token: %w", upstreamKey, err)
	}
	key := tokenCacheKey(upstreamKey, ch)
	sum := sha256.Sum256([]byte(auth))
	if tok, ok := ts.lookup(key, sum); ok {
		return tok, nil
	}
	flightKey := key + "\x00" + string(sum[:])
	res := ts.group.DoChan(flightKey, func() (any, error) {
		// A caller that missed the cache just before another flight for
		// this key stored its token starts a flight of its own: it finds
		// that token here instead of asking the realm again.
		if tok, ok := ts.lookup(key, sum); ok {
			return tok, nil
		}
		// Detached from ctx: one impatient caller must not fail the others
		// sharing this fetch; tokenFetchTimeout still bounds it.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenFetchTimeout)
		defer cancel()
		ticket, err := ts.admitRealm(realmKey)
		if err != nil {
			return "", err
		}
		start := ts.now()
		tok, life, err := ts.fetch(fctx, rt, realm, auth, ch)
		ticket.Done(realmVerdict(err))
		if err != nil {
			return "", err
		}
		ts.store(key, tokenEntry{token: tok, expires: start.Add(life - tokenMargin(life)), authSum: sum})
		return tok, nil
	})
	select {
	case r := <-res:
		if r.Err != nil {
			return "", fmt.Errorf("upstream %s: token: %w", upstreamKey, r.Err)
		}
		return r.Val.(string), nil
	case <-ctx.Done():
		return "", fmt.Errorf("upstream %s: token: %w", upstreamKey, ctx.Err())
	}
}

// cached returns the fresh cached token for (upstreamKey, ch) fetched with
// auth, without fetching: sent on a candidate's first try, so a registry
// that wants a token does not see every request twice.
func (ts *TokenSource) cached(upstreamKey, auth string, ch Challenge) (string, bool) {
	return ts.lookup(tokenCacheKey(upstreamKey, ch), sha256.Sum256([]byte(auth)))
}

// admitRealm asks the realm host's breaker, if there is one, to admit a
// fetch.
func (ts *TokenSource) admitRealm(realmKey string) (breakerstate.Ticket, error) {
	if ts.breakers == nil || realmKey == "" {
		return breakerstate.Ticket{}, nil
	}
	t, err := ts.breakers.Admit(realmKey)
	if err != nil {
		return t, fmt.Errorf("token realm %s: %w", realmKey, err)
	}
	return t, nil
}

// realmStatusError is a realm's answer other than 200.
type realmStatusError struct {
	realm  string
	status int
}

func (e *realmStatusError) Error() string {
	return fmt.Sprintf("token realm %s answered %d", e.realm, e.status)
}

// realmVerdict judges one token fetch for the realm host's breaker, by the
// same rules as any attempt: the realm refusing the credentials is alive, a
// 5xx or a transport error is a failure.
func realmVerdict(err error) breakerstate.Outcome {
	var se *realmStatusError
	switch {
	case err == nil:
		return breakerstate.Success
	case errors.As(err, &se):
		return attempt.Decide(&http.Response{StatusCode: se.status}, nil, nil)
	}
	return attempt.Decide(nil, err, nil)
}

// Invalidate drops the cached token for (upstreamKey, ch), whatever
// credentials fetched it: the upstream has just refused it with a 401.
func (ts *TokenSource) Invalidate(upstreamKey string, ch Challenge) {
	ts.mu.Lock()
	delete(ts.cache, tokenCacheKey(upstreamKey, ch))
	ts.mu.Unlock()
}

func (ts *TokenSource) lookup(key string, sum [sha256.Size]byte) (string, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	e, ok := ts.cache[key]
	if !ok || e.authSum != sum || !ts.now().Before(e.expires) {
		return "", false
	}
	return e.token, true
}

// store adds e, first dropping expired entries and then the entries closest
// to expiry while the cache is full. The scan is O(n) but runs only on a
// full cache, at most once per token fetch.
func (ts *TokenSource) store(key string, e tokenEntry) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.cache[key]; !ok && len(ts.cache) >= ts.maxEntries {
		now := ts.now()
		for k, v := range ts.cache {
			if !now.Before(v.expires) {
				delete(ts.cache, k)
			}
		}
		for len(ts.cache) >= ts.maxEntries {
			oldest, first := "", true
			for k, v := range ts.cache {
				if first || v.expires.Before(ts.cache[oldest].expires) {
					oldest, first = k, false
				}
			}
			delete(ts.cache, oldest)
		}
	}
	ts.cache[key] = e
}

// fetch asks the realm for a token and returns it with its lifetime.
func (ts *TokenSource) fetch(ctx context.Context, rt http.RoundTripper, realm *url.URL, auth string, ch Challenge) (string, time.Duration, error) {
	u := *realm
	q := u.Query()
	if ch.Service != "" {
		q.Set("service", ch.Service)
	}
	for _, sc := range ch.Scopes {
		q.Add("scope", sc)
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", 0, fmt.Errorf("token request: %w", err)
	}
	if auth != "" {
		user, pass, _ := strings.Cut(auth, ":")
		req.SetBasicAuth(user, pass)
	}
	resp, err := ts.guardedClient(rt).Do(req)
	if err != nil {
		// The url.Error names the realm URL, whose query holds only
		// service and scope, never a credential.
		return "", 0, fmt.Errorf("token request: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, &realmStatusError{realm: redactedRealm(realm), status: resp.StatusCode}
	}
	var ans tokenAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxTokenBody)).Decode(&ans); err != nil {
		return "", 0, fmt.Errorf("token realm %s: decoding answer: %w", redactedRealm(realm), err)
	}
	tok := ans.Token
	if tok == "" {
		tok = ans.AccessToken
	}
	if tok == "" {
		return "", 0, fmt.Errorf("token realm %s: answer without token", redactedRealm(realm))
	}
	return tok, tokenLifetime(ans.ExpiresIn), nil
}

// guardedClient returns a shallow copy of the client, using rt when it is
// set, whose redirects must also pass checkRealm, so a realm cannot bounce
// us to the metadata service.
func (ts *TokenSource) guardedClient(rt http.RoundTripper) *http.Client {
	c := *ts.client
	if rt != nil {
		c.Transport = rt
	}
	inner := ts.client.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if _, err := checkRealm(req.URL.String()); err != nil {
			return fmt.Errorf("token redirect: %w", err)
		}
		if inner != nil {
			return inner(req, via)
		}
		if len(via) >= 10 {
			return errors.New("token request: stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// checkRealm parses a realm and refuses schemes other than http(s) and hosts
// that are IP literals the destination policy refuses (metadata, link-local,
// unspecified, in any spelling). Host names are left to the proxy's dialer,
// which checks resolved addresses.
func checkRealm(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: unparsable", errBadRealm)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: scheme %q", errBadRealm, u.Scheme)
	}
	host := strings.TrimSuffix(u.Hostname(), ".")
	if host == "" {
		return nil, fmt.Errorf("%w: no host", errBadRealm)
	}
	if destination.RefusedHost(host) {
		return nil, fmt.Errorf("%w: address %s", errBadRealm, host)
	}
	// Credentials in the realm URL would be sent by net/http on our behalf;
	// only the candidate's configured credentials may be.
	u.User = nil
	return u, nil
}

// tokenCacheKey identifies a token by upstream, realm, service and the
// sorted set of scopes, since the realm grants exactly what was asked.
func tokenCacheKey(upstreamKey string, ch Challenge) string {
	scopes := slices.Clone(ch.Scopes)
	slices.Sort(scopes)
	return strings.Join([]string{upstreamKey, ch.Realm, ch.Service, strings.Join(scopes, " ")}, "\x00")
}

func tokenLifetime(expiresIn int64) time.Duration {
	if expiresIn <= 0 {
		return defaultTokenLifetime
	}
	if expiresIn > int64(maxTokenLifetime/time.Second) {
		return maxTokenLifetime
	}
	return time.Duration(expiresIn) * time.Second
}

// tokenMargin is a tenth of the lifetime, at most maxTokenMargin.
func tokenMargin(life time.Duration) time.Duration {
	return min(life/10, maxTokenMargin)
}

// redactedRealm names a realm in errors without its query.
func redactedRealm(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.Path
}
