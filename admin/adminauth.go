package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// adminOpenPath reports whether path is one of the admin endpoints that
// never need the admin token (docs/behaviour.md §7): scrapers and kubelet
// probes are not handed a secret, and what those endpoints show is meant
// for them.
func adminOpenPath(path string) bool {
	switch path {
	case "/metrics", "/health", "/ready":
		return true
	}
	return false
}

// requireAdminToken wraps the admin mux: when admin_token is set, every
// call except the open paths needs "Authorization: Bearer <token>". The
// token is read from the configuration in force for each request, so a
// reload that sets, changes or removes it applies to the next call.
func (s *Server) requireAdminToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := s.o.Token()
		if token == "" || adminOpenPath(r.URL.Path) || bearerMatches(r.Header.Get("Authorization"), token) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="nora-breaker admin"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "admin token required"})
	})
}

// bearerMatches reports whether an Authorization header carries token as a
// Bearer credential. Both sides are hashed before the constant-time
// comparison, so neither the token's bytes nor its length can be learnt
// from response timing.
func bearerMatches(header, token string) bool {
	scheme, got, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
