package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// productModule is nora-breaker's own module path. The harness is a module
// of its own (bench/go.mod), so the directory it runs in is not the one it
// builds: it looks upwards for the go.mod that declares this path.
const productModule = "github.com/nora-breaker/nora-breaker"

// findRepo returns the nearest directory at or above dir whose go.mod
// declares productModule.
func findRepo(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if modulePath(filepath.Join(d, "go.mod")) == productModule {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod declaring %s at or above %s (pass --repo)", productModule, dir)
		}
	}
}

// modulePath is the path a go.mod's module line declares, or "" when the
// file is missing or has none.
func modulePath(goMod string) string {
	f, err := os.Open(goMod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		// A comment may follow; the path itself may be quoted.
		rest, _, _ = strings.Cut(rest, "//")
		return strings.Trim(strings.TrimSpace(rest), `"`)
	}
	return ""
}
