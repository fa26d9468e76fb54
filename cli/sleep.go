package cli

import (
	"fmt"
	"strconv"
	"time"
)

// maxSleep bounds `nora-breaker sleep`: a preStop delay longer than this
// is a typo, and the pod's grace period would cut it anyway.
const maxSleep = time.Hour

// ParseSleep reads the argument of `nora-breaker sleep`: whole seconds
// ("5"), as sleep(1) takes them, or a Go duration ("1500ms").
func ParseSleep(arg string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseInt(arg, 10, 64); err == nil {
		if n < 0 || n > int64(maxSleep/time.Second) {
			return 0, fmt.Errorf("%s seconds is outside 0 to %d", arg, int64(maxSleep/time.Second))
		}
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(arg); err != nil {
		return 0, fmt.Errorf("%q is neither whole seconds nor a duration such as 1500ms", arg)
	}
	if d < 0 || d > maxSleep {
		return 0, fmt.Errorf("%s is outside 0s to %s", d, maxSleep)
	}
	return d, nil
}
