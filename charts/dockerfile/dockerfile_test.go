// Package dockerfile_test checks the repository's Dockerfile without a
// container engine: it parses the file and verifies the stages, the runtime
// user, entrypoint, ports and config path, and that the image compiles the
// binary with exactly the go build command of scripts/build.sh, the one CI
// uses. Drift between the two would ship an image unlike the tested binary.
package dockerfile_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with continuation lines joined.
type instruction struct {
	Cmd  string // upper-cased keyword: FROM, RUN, ...
	Args string // the rest of the line, trimmed
	Line int    // 1-based line where the instruction starts
}

// stage is a FROM and the instructions up to the next FROM.
type stage struct {
	Image, Name string
	Body        []instruction
}

// parse splits Dockerfile text into stages. It understands what this
// repository's Dockerfile uses: comments, backslash continuations and
// "FROM image AS name"; heredocs are not supported and are reported.
func parse(text string) ([]stage, error) {
	var (
		stages  []stage
		pending strings.Builder
		start   int
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if pending.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if pending.Len() == 0 {
			start = n
		}
		if strings.HasPrefix(line, "#") { // a comment inside a continuation
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending.WriteString(cont + " ")
			continue
		}
		pending.WriteString(line)
		in, err := split(pending.String(), start)
		pending.Reset()
		if err != nil {
			return nil, err
		}
		if in.Cmd == "FROM" {
			f := strings.Fields(in.Args)
			st := stage{Image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.Name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if in.Cmd == "ARG" {
				continue // global ARGs may precede the first FROM
			}
			return nil, fmt.Errorf("line %d: %s before the first FROM", in.Line, in.Cmd)
		}
		stages[len(stages)-1].Body = append(stages[len(stages)-1].Body, in)
	}
	if pending.Len() > 0 {
		return nil, fmt.Errorf("line %d: continuation runs past the end of the file", start)
	}
	return stages, sc.Err()
}

func split(s string, line int) (instruction, error) {
	cmd, args, _ := strings.Cut(s, " ")
	in := instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args), Line: line}
	if strings.Contains(in.Args, "<<") {
		return in, fmt.Errorf("line %d: heredocs are not supported by this check", line)
	}
	if in.Cmd == "FROM" && in.Args == "" {
		return in, fmt.Errorf("line %d: FROM without an image", line)
	}
	return in, nil
}

// find returns the args of every instruction cmd in the stage.
func (s stage) find(cmd string) []string {
	var out []string
	for _, in := range s.Body {
		if in.Cmd == cmd {
			out = append(out, in.Args)
		}
	}
	return out
}

// shellWords splits a command line the way sh would for the simple, quoted
// words used in build commands (double and single quotes, no expansions).
func shellWords(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote in %q", quote, s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// goBuild extracts the "CGO_ENABLED=0 go build ..." words from a command
// line, dropping the output path (-o X), which differs on purpose.
func goBuild(line string) ([]string, error) {
	i := strings.Index(line, "go build")
	if i < 0 {
		return nil, fmt.Errorf("no go build in %q", line)
	}
	// Keep the environment assignments written just before "go build".
	envStart := strings.LastIndex(line[:i], "CGO_ENABLED=")
	if envStart >= 0 {
		i = envStart
	}
	words, err := shellWords(line[i:])
	if err != nil {
		return nil, err
	}
	var out []string
	for j := 0; j < len(words); j++ {
		if words[j] == "-o" {
			j++ // skip the path
			continue
		}
		out = append(out, words[j])
	}
	return out, nil
}

// buildScriptCommand returns the go build line of scripts/build.sh.
func buildScriptCommand(script string) (string, error) {
	for l := range strings.SplitSeq(script, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "#") && strings.Contains(l, "go build") {
			return l, nil
		}
	}
	return "", fmt.Errorf("scripts/build.sh has no go build line")
}

// check returns every way the parsed Dockerfile departs from the contract.
func check(stages []stage, scriptBuild []string) []string {
	var bad []string
	if len(stages) != 2 {
		return []string{fmt.Sprintf("want 2 stages (build, runtime), got %d", len(stages))}
	}
	build, rt := stages[0], stages[1]
	if build.Image != "golang:1.26" || build.Name != "build" {
		bad = append(bad, fmt.Sprintf("build stage is %q AS %q, want golang:1.26 AS build", build.Image, build.Name))
	}
	if rt.Image != "gcr.io/distroless/static-debian12:nonroot" {
		bad = append(bad, fmt.Sprintf("runtime image %q is not distroless static nonroot", rt.Image))
	}
	if u := rt.find("USER"); len(u) != 1 || (u[0] != "nonroot" && u[0] != "nonroot:nonroot" && u[0] != "65532:65532") {
		bad = append(bad, fmt.Sprintf("runtime USER = %q, want nonroot", u))
	}
	wantExact := map[string]string{"ENTRYPOINT": `["/nora-breaker"]`, "CMD": `["serve"]`}
	for cmd, want := range wantExact {
		if got := rt.find(cmd); len(got) != 1 || got[0] != want {
			bad = append(bad, fmt.Sprintf("runtime %s = %q, want %s", cmd, got, want))
		}
	}
	var ports []string
	for _, e := range rt.find("EXPOSE") {
		ports = append(ports, strings.Fields(e)...)
	}
	for _, p := range []string{"3128", "9128"} {
		if !slices.Contains(ports, p) {
			bad = append(bad, "runtime does not EXPOSE "+p)
		}
	}
	if !slices.Contains(rt.find("ENV"), "NORA_CONFIG_PATH=/etc/nora/config.toml") {
		bad = append(bad, "runtime lacks ENV NORA_CONFIG_PATH=/etc/nora/config.toml")
	}
	if !slices.Contains(rt.find("COPY"), "--from=build /out/nora-breaker /nora-breaker") {
		bad = append(bad, "runtime does not copy /out/nora-breaker from the build stage")
	}
	bad = append(bad, checkBuildRun(build, scriptBuild)...)
	return bad
}

func checkBuildRun(build stage, scriptBuild []string) []string {
	var runs []string
	for _, r := range build.find("RUN") {
		if strings.Contains(r, "go build") {
			runs = append(runs, r)
		}
	}
	if len(runs) != 1 {
		return []string{fmt.Sprintf("build stage has %d go build RUNs, want 1", len(runs))}
	}
	if !strings.Contains(runs[0], "-o /out/nora-breaker") {
		return []string{"build RUN does not write /out/nora-breaker"}
	}
	got, err := goBuild(runs[0])
	if err != nil {
		return []string{err.Error()}
	}
	if !reflect.DeepEqual(got, scriptBuild) {
		return []string{fmt.Sprintf("Dockerfile builds with %q, scripts/build.sh with %q", got, scriptBuild)}
	}
	return nil
}

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

func scriptWords(t *testing.T) []string {
	t.Helper()
	line, err := buildScriptCommand(readRepoFile(t, "scripts/build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	words, err := goBuild(line)
	if err != nil {
		t.Fatal(err)
	}
	return words
}

// TestBuildScriptFlags pins the flags the issue asks for, so that build.sh
// and the Dockerfile cannot agree on something else.
func TestBuildScriptFlags(t *testing.T) {
	want := []string{"CGO_ENABLED=0", "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=${VERSION}", "."}
	if got := scriptWords(t); !reflect.DeepEqual(got, want) {
		t.Fatalf("scripts/build.sh go build = %q, want %q", got, want)
	}
}

func TestDockerfile(t *testing.T) {
	stages, err := parse(readRepoFile(t, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range check(stages, scriptWords(t)) {
		t.Error(problem)
	}
}

// TestCheckCatchesDrift mutates the real Dockerfile and expects each change
// to be reported, so the checks above can actually fail.
func TestCheckCatchesDrift(t *testing.T) {
	orig := readRepoFile(t, "Dockerfile")
	sw := scriptWords(t)
	tests := []struct {
		name, old, new, want string
	}{
		{"root user", "USER nonroot:nonroot", "USER root", "runtime USER"},
		{"no USER", "USER nonroot:nonroot", "", "runtime USER"},
		{"cgo on", "CGO_ENABLED=0 go build", "CGO_ENABLED=1 go build", "Dockerfile builds with"},
		{"no trimpath", "-trimpath ", "", "Dockerfile builds with"},
		{"unstamped", "-X main.version=${VERSION}", "", "Dockerfile builds with"},
		{"shell entrypoint", `ENTRYPOINT ["/nora-breaker"]`, "ENTRYPOINT /nora-breaker", "runtime ENTRYPOINT"},
		{"metrics port", "EXPOSE 3128 9128", "EXPOSE 3128", "EXPOSE 9128"},
		{"full runtime image", "gcr.io/distroless/static-debian12:nonroot AS runtime", "debian:12 AS runtime", "runtime image"},
		{"single stage", "FROM gcr.io/distroless/static-debian12:nonroot AS runtime\n", "", "want 2 stages"},
		{"config path", "ENV NORA_CONFIG_PATH=/etc/nora/config.toml", "ENV NORA_CONFIG_PATH=/config.toml", "NORA_CONFIG_PATH"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(orig, tc.old) {
				t.Fatalf("Dockerfile no longer contains %q; update this test", tc.old)
			}
			stages, err := parse(strings.Replace(orig, tc.old, tc.new, 1))
			if err != nil {
				t.Fatal(err)
			}
			problems := strings.Join(check(stages, sw), "\n")
			if !strings.Contains(problems, tc.want) {
				t.Fatalf("problems %q do not mention %q", problems, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, text string
		stages     int
		wantErr    string
	}{
		{"continuation", "FROM a AS b\nRUN x \\\n  # note\n  y\n", 1, ""},
		{"global arg", "ARG V=1\nFROM a\n", 1, ""},
		{"before from", "RUN x\nFROM a\n", 0, "before the first FROM"},
		{"heredoc", "FROM a\nCOPY <<EOF /x\nhi\nEOF\n", 0, "heredocs"},
		{"dangling", "FROM a\nRUN x \\\n", 0, "past the end"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := parse(tc.text)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(st) != tc.stages {
				t.Fatalf("parse = %d stages, %v; want %d", len(st), err, tc.stages)
			}
		})
	}
}
