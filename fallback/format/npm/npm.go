// Package npm is what the npm format adds to the fallback loop: a client's
// read of a package for writing it back is the addressed registry's alone.
package npm

import (
	"net/http"

	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// Format is the npm format. It keeps no state.
type Format struct{ format.Plain }

var _ format.Format = Format{}

// Substitutable: a GET or HEAD, except a read for writing. npm deprecate,
// npm unpublish <pkg>@<version>, npm owner and npm access GET
// /<pkg>?write=true, change the document and PUT it back whole to the
// registry they read it from; another registry's document, or a stale
// copy, written back over the package would undo whatever it lacks
// (versions published since, a deprecation, an owner). Such a read gets
// the addressed registry's own answer or the proxy's 503
// (docs/behaviour.md §5.4).
func (Format) Substitutable(req *http.Request) bool {
	if req.URL.Query().Has("write") {
		return false
	}
	return format.SafeMethod(req.Method)
}
