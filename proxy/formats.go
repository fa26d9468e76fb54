package proxy

import (
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/fallback/format/docker"
	"github.com/nora-breaker/nora-breaker/fallback/format/npm"
	"github.com/nora-breaker/nora-breaker/fallback/format/pypi"
)

// formats are the formats that add something to the fallback loop; every
// other one is format.Plain. docker's token source has no client of its
// own: every fetch goes through the requesting snapshot's transport, which
// the loop hands it.
func formats(now func() time.Time, breakers *breakerstate.Set) format.Set {
	return format.Set{
		"docker": docker.New(docker.Options{Now: now, Breakers: breakers}),
		"maven":  format.Plain{FinalNotFound: true},
		"npm":    npm.Format{},
		"pypi":   pypi.Format{},
	}
}
