package config

import (
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// prefixPattern is what shared_state_prefix may contain: enough for
// "team-a:nora-breaker", nothing that needs quoting in redis-cli.
var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// validateSharedState checks the Redis URL and prefix of [sidecar]
// shared_state. Problems never quote the URL: it may carry a password.
func validateSharedState(s *Sidecar, at func(string) origin, probs *problems) {
	if s.SharedState != "" {
		if problem := sharedStateProblem(s.SharedState); problem != "" {
			probs.add(at("shared_state").errorf("%s", problem))
		}
	}
	if !prefixPattern.MatchString(s.SharedStatePrefix) {
		probs.add(at("shared_state_prefix").errorf("must be 1 to 64 letters, digits, '_', '.', ':' or '-' (got %q)",
			s.SharedStatePrefix))
	}
	if s.SharedStatePassword != "" && s.SharedState == "" {
		probs.add(at("shared_state_password").errorf("is set but shared_state is not"))
	}
}

// sharedStateProblem says what is wrong with a shared_state URL, or "".
func sharedStateProblem(raw string) string {
	const usage = "must be a redis://host:port[/db], rediss://host:port[/db] or unix:///socket/path[?db=N] URL"
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return usage
	}
	switch u.Scheme {
	case "redis", "rediss":
		return tcpSharedStateProblem(u)
	case "unix":
		return unixSharedStateProblem(u)
	}
	return "scheme must be redis://, rediss:// or unix:// (got " + strconv.Quote(u.Scheme) + ")"
}

// tcpSharedStateProblem checks a redis:// or rediss:// URL.
func tcpSharedStateProblem(u *url.URL) string {
	if u.Hostname() == "" {
		return "must name a host, e.g. redis://redis.build.svc:6379/0"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "bad port " + strconv.Quote(p)
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" && !isDBNumber(db) {
		return "path must be a database number such as /0"
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "must not have a query or fragment"
	}
	return ""
}

// unixSharedStateProblem checks a unix:// URL: a Redis on the same host (or
// in the same pod) reached through its socket file, as go-redis spells it.
// The path is the socket, so the database number goes in ?db=N.
func unixSharedStateProblem(u *url.URL) string {
	if u.Host != "" {
		return "a unix:// URL names a socket path, not a host, e.g. unix:///run/redis/redis.sock"
	}
	if !path.IsAbs(u.Path) || strings.HasSuffix(u.Path, "/") {
		return "must name the socket's absolute path, e.g. unix:///run/redis/redis.sock"
	}
	if u.Fragment != "" || (u.RawQuery != "" && !isDBQuery(u.RawQuery)) {
		return "a unix:// URL may only have ?db=N (a database number) after the path"
	}
	return ""
}

// isDBQuery reports whether a query is exactly db=<number>.
func isDBQuery(q string) bool {
	db, ok := strings.CutPrefix(q, "db=")
	return ok && isDBNumber(db)
}

func isDBNumber(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0
}

// redactSharedState hides the password of a shared_state value (in the
// user info or, wrongly placed, in the query) for error messages.
func redactSharedState(s string) string {
	s = redactURL(s)
	if i := strings.IndexAny(s, "?#"); i >= 0 && !isDBQuery(s[i+1:]) {
		return s[:i] + "?***"
	}
	return s
}

// SharedStateDisplay returns shared_state with any password replaced by
// "***", for check-config, status and logs; "off" when unset.
func (s Sidecar) SharedStateDisplay() string {
	if s.SharedState == "" {
		return "off"
	}
	return redactSharedState(s.SharedState)
}
