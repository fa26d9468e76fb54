//go:build !linux

package coalesce

import "errors"

// freeBytes is not known off Linux: a body larger than the bound is then
// never spooled, which only means it is not shared.
func freeBytes(string) (int64, error) { return 0, errors.New("free space unknown on this system") }
