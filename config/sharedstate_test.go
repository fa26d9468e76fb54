package config

import (
	"strings"
	"testing"
)

func TestSharedState(t *testing.T) {
	const secret = "s3cr3t-pw"
	for _, c := range []struct {
		name       string
		file       string
		env        map[string]string
		wantURL    string
		wantPrefix string
		wantPass   string
		wantErr    string // substring; "" = valid
	}{
		{name: "unset is off", wantPrefix: "nora-breaker"},
		{name: "file", file: "[sidecar]\nshared_state = \"redis://redis:6379/0\"\nshared_state_prefix = \"team-a\"\n",
			wantURL: "redis://redis:6379/0", wantPrefix: "team-a"},
		{name: "env beats file", file: "[sidecar]\nshared_state = \"redis://a:6379\"\n",
			env:     map[string]string{"NORA_SIDECAR_SHARED_STATE": "rediss://b:6380/2", "NORA_SIDECAR_SHARED_STATE_PASSWORD": secret},
			wantURL: "rediss://b:6380/2", wantPrefix: "nora-breaker", wantPass: secret},
		{name: "no port is fine", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "redis://redis"},
			wantURL: "redis://redis", wantPrefix: "nora-breaker"},
		{name: "password in URL", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "redis://:" + secret + "@redis:6379"},
			wantURL: "redis://:" + secret + "@redis:6379", wantPrefix: "nora-breaker"},
		{name: "http scheme", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "http://:" + secret + "@redis:6379"},
			wantErr: `scheme must be redis://, rediss:// or unix://`},
		{name: "unix socket", file: "[sidecar]\nshared_state = \"unix:///run/redis/redis.sock\"\n",
			wantURL: "unix:///run/redis/redis.sock", wantPrefix: "nora-breaker"},
		{name: "unix socket with db and password", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "unix://:" + secret + "@/run/r.sock?db=3"},
			wantURL: "unix://:" + secret + "@/run/r.sock?db=3", wantPrefix: "nora-breaker"},
		{name: "unix with host", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "unix://redis/run/r.sock"},
			wantErr: "not a host"},
		{name: "unix relative", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "unix:run/r.sock"},
			wantErr: "must be a redis://"},
		{name: "unix no path", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "unix://"},
			wantErr: "absolute path"},
		{name: "unix folder", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "unix:///run/redis/"},
			wantErr: "absolute path"},
		{name: "unix password in query", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "unix:///run/r.sock?password=" + secret},
			wantErr: "only have ?db=N"},
		{name: "unix bad db", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "unix:///run/r.sock?db=x"},
			wantErr: "only have ?db=N"},
		{name: "no scheme", file: "[sidecar]\nshared_state = \"redis:6379\"\n", wantErr: "must be a redis://"},
		{name: "no host", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "redis://:" + secret + "@:6379"},
			wantErr: "must name a host"},
		{name: "bad port", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "redis://u:" + secret + "@h:99999"},
			wantErr: "bad port"},
		{name: "bad db", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "redis://h:6379/zero"},
			wantErr: "database number"},
		{name: "query", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "redis://h:6379/0?password=" + secret},
			wantErr: "query"},
		{name: "unparsable", env: map[string]string{"NORA_SIDECAR_SHARED_STATE": "redis://u:" + secret + "@h:6379/%zz"},
			wantErr: "must be a redis://"},
		{name: "bad prefix", env: map[string]string{"NORA_SIDECAR_SHARED_STATE_PREFIX": "a b"},
			wantErr: `NORA_SIDECAR_SHARED_STATE_PREFIX="a b": must be 1 to 64`},
		{name: "empty prefix", file: "[sidecar]\nshared_state_prefix = \"\"\n", wantErr: "shared_state_prefix"},
		{name: "password without URL", env: map[string]string{"NORA_SIDECAR_SHARED_STATE_PASSWORD": secret},
			wantErr: "shared_state is not"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := load(t, c.file, c.env, Flags{})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error leaks the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			s := cfg.Sidecar
			if s.SharedState != c.wantURL || s.SharedStatePrefix != c.wantPrefix || s.SharedStatePassword != c.wantPass {
				t.Fatalf("got %q %q %q, want %q %q %q", s.SharedState, s.SharedStatePrefix, s.SharedStatePassword,
					c.wantURL, c.wantPrefix, c.wantPass)
			}
			if strings.Contains(s.SharedStateDisplay(), secret) {
				t.Fatalf("SharedStateDisplay leaks the password: %s", s.SharedStateDisplay())
			}
		})
	}
}

func TestSharedStateDisplay(t *testing.T) {
	for in, want := range map[string]string{
		"":                             "off",
		"redis://redis:6379/0":         "redis://redis:6379/0",
		"rediss://user:pw@redis:6380":  "rediss://***@redis:6380",
		"redis://:pw@redis.svc:6379/1": "redis://***@redis.svc:6379/1",
		"unix:///run/r.sock":           "unix:///run/r.sock",
		"unix://:pw@/run/r.sock?db=2":  "unix://***@/run/r.sock?db=2",
		"unix:///run/r.sock?pw=x":      "unix:///run/r.sock?***",
	} {
		if got := (Sidecar{SharedState: in}).SharedStateDisplay(); got != want {
			t.Errorf("SharedStateDisplay(%q) = %q, want %q", in, got, want)
		}
	}
}
