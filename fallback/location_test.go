package fallback

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
)

func TestAbsoluteLocation(t *testing.T) {
	base, err := url.Parse("https://robot:secret@mirror.test:8443/v2/library/nginx/blobs/sha256:abc?x=1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"absolute path", []string{"/blobs/upload/1"}, []string{"https://mirror.test:8443/blobs/upload/1"}},
		{"relative path", []string{"./sha256:def"}, []string{"https://mirror.test:8443/v2/library/nginx/blobs/sha256:def"}},
		{"dot segments", []string{"../../other/x"}, []string{"https://mirror.test:8443/v2/library/other/x"}},
		{"query only", []string{"?y=2"}, []string{"https://mirror.test:8443/v2/library/nginx/blobs/sha256:abc?y=2"}},
		{"network-path reference takes the base scheme", []string{"//cdn.test/blob"}, []string{"https://cdn.test/blob"}},
		{"absolute URL untouched", []string{"http://cdn.test/blob?sig=a%2Fb"}, []string{"http://cdn.test/blob?sig=a%2Fb"}},
		{"unparsable untouched", []string{"%zz"}, []string{"%zz"}},
		{"several values", []string{"/a", "https://x.test/b"}, []string{"https://mirror.test:8443/a", "https://x.test/b"}},
		{"absent", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.in {
				h.Add("Location", v)
			}
			absoluteLocation(h, base)
			if got := h.Values("Location"); !slices.Equal(got, tt.want) {
				t.Errorf("Location = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAbsoluteLocationNilBase(t *testing.T) {
	h := http.Header{"Location": {"/x"}}
	absoluteLocation(h, nil)
	if got := h.Get("Location"); got != "/x" {
		t.Errorf("Location = %q, want it untouched", got)
	}
}
