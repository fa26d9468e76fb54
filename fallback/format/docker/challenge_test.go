package docker

import (
	"net/http"
	"reflect"
	"testing"
)

func TestParseChallenges(t *testing.T) {
	tests := []struct {
		name   string
		header []string
		want   []Challenge
	}{
		{
			name:   "docker hub",
			header: []string{`Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull"`},
			want: []Challenge{{
				Scheme: "bearer", Realm: "https://auth.docker.io/token", Service: "registry.docker.io",
				Scopes: []string{"repository:library/nginx:pull"},
				Params: map[string]string{"realm": "https://auth.docker.io/token", "service": "registry.docker.io", "scope": "repository:library/nginx:pull"},
			}},
		},
		{
			name:   "ghcr ping without scope",
			header: []string{`Bearer realm="https://ghcr.io/token",service="ghcr.io"`},
			want: []Challenge{{
				Scheme: "bearer", Realm: "https://ghcr.io/token", Service: "ghcr.io",
				Params: map[string]string{"realm": "https://ghcr.io/token", "service": "ghcr.io"},
			}},
		},
		{
			name:   "case-insensitive names, spaces around equals, token values",
			header: []string{`BEARER Realm = "https://r.test/t" , SERVICE=reg.test`},
			want: []Challenge{{
				Scheme: "bearer", Realm: "https://r.test/t", Service: "reg.test",
				Params: map[string]string{"realm": "https://r.test/t", "service": "reg.test"},
			}},
		},
		{
			name:   "repeated scope and space-separated scopes, deduplicated",
			header: []string{`Bearer realm="r",scope="repository:a:pull repository:b:pull",scope="repository:c:pull,push",scope="repository:a:pull"`},
			want: []Challenge{{
				Scheme: "bearer", Realm: "r",
				Scopes: []string{"repository:a:pull", "repository:b:pull", "repository:c:pull,push"},
				Params: map[string]string{"realm": "r", "scope": "repository:a:pull repository:b:pull"},
			}},
		},
		{
			name:   "quoted-pair escapes",
			header: []string{`Newauth realm="apps", title="Login to \"apps\" \\ here"`},
			want: []Challenge{{
				Scheme: "newauth", Realm: "apps",
				Params: map[string]string{"realm": "apps", "title": `Login to "apps" \ here`},
			}},
		},
		{
			name:   "several challenges in one value",
			header: []string{`Newauth realm="apps", type=1, title="x", Basic realm="simple", Bearer realm="https://b.test/token",service=b`},
			want: []Challenge{
				{Scheme: "newauth", Realm: "apps", Params: map[string]string{"realm": "apps", "type": "1", "title": "x"}},
				{Scheme: "basic", Realm: "simple", Params: map[string]string{"realm": "simple"}},
				{Scheme: "bearer", Realm: "https://b.test/token", Service: "b", Params: map[string]string{"realm": "https://b.test/token", "service": "b"}},
			},
		},
		{
			name:   "several header values",
			header: []string{`Basic realm="a"`, `Bearer realm="b"`},
			want: []Challenge{
				{Scheme: "basic", Realm: "a", Params: map[string]string{"realm": "a"}},
				{Scheme: "bearer", Realm: "b", Params: map[string]string{"realm": "b"}},
			},
		},
		{
			name:   "token68 then another challenge",
			header: []string{`Negotiate YII/abc+d==, Bearer realm="r"`},
			want: []Challenge{
				{Scheme: "negotiate", Token68: "YII/abc+d==", Params: map[string]string{}},
				{Scheme: "bearer", Realm: "r", Params: map[string]string{"realm": "r"}},
			},
		},
		{
			name:   "bare schemes",
			header: []string{`Negotiate, NTLM`},
			want: []Challenge{
				{Scheme: "negotiate", Params: map[string]string{}},
				{Scheme: "ntlm", Params: map[string]string{}},
			},
		},
		{
			name:   "first value of a repeated param wins",
			header: []string{`Bearer realm="first", realm="second"`},
			want:   []Challenge{{Scheme: "bearer", Realm: "first", Params: map[string]string{"realm": "first"}}},
		},
		{
			name:   "unterminated quoted string",
			header: []string{`Bearer realm="https://r.test/t`},
			want:   []Challenge{{Scheme: "bearer", Realm: "https://r.test/t", Params: map[string]string{"realm": "https://r.test/t"}}},
		},
		{
			name:   "garbage is skipped",
			header: []string{`"junk", @@@, Bearer realm="r"`},
			want:   []Challenge{{Scheme: "bearer", Realm: "r", Params: map[string]string{"realm": "r"}}},
		},
		{name: "empty", header: []string{"", " , ,"}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseChallenges(tt.header)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseChallenges(%q)\n got %#v\nwant %#v", tt.header, got, tt.want)
			}
		})
	}
}

func TestBearerChallenge(t *testing.T) {
	tests := []struct {
		name      string
		values    []string
		wantRealm string
		wantOK    bool
	}{
		{"bearer after basic", []string{`Basic realm="x"`, `Bearer realm="https://r.test/t",service="s"`}, "https://r.test/t", true},
		{"bearer without realm is skipped", []string{`Bearer service="s", Bearer realm="https://r2.test/t"`}, "https://r2.test/t", true},
		{"basic only", []string{`Basic realm="x"`}, "", false},
		{"no header", nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("WWW-Authenticate", v)
			}
			ch, ok := bearerChallenge(h)
			if ok != tt.wantOK || ch.Realm != tt.wantRealm {
				t.Errorf("bearerChallenge = (%q, %v), want (%q, %v)", ch.Realm, ok, tt.wantRealm, tt.wantOK)
			}
		})
	}
}

func FuzzParseChallenges(f *testing.F) {
	seeds := []string{
		`Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull"`,
		`Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:user/image:pull"`,
		`Bearer realm="http://127.0.0.1:5001/auth",service="Docker registry",scope="repository:a:pull repository:b:push",error="invalid_token"`,
		`Basic realm="Registry Realm"`,
		`Negotiate YII/abc+d==, Bearer realm="r"`,
		`Bearer realm="unterminated`,
		`Bearer realm="a\"b\\`,
		`=,=,"",\`,
		`Bearer ,,, realm = , scope=`,
		"Bearer\trealm=\"x\"\x00\xff",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		chs := parseChallenges([]string{s})
		if len(chs) > maxChallenges {
			t.Fatalf("%d challenges, limit %d", len(chs), maxChallenges)
		}
		for _, ch := range chs {
			if ch.Scheme == "" {
				t.Fatalf("challenge with empty scheme from %q", s)
			}
			if ch.Realm != ch.Params["realm"] || ch.Service != ch.Params["service"] {
				t.Fatalf("realm/service disagree with params: %#v", ch)
			}
		}
	})
}
