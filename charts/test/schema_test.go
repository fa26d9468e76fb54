package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/config"
)

// TestSchemaKnowsNORAsKeys: the schema's upstreams tables accept exactly
// the keys the proxy knows in NORA's tables (config.FormatTableKeys, what
// its typo warnings check), no more and no fewer, and refuse the rest.
func TestSchemaKnowsNORAsKeys(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Upstreams struct {
				Properties map[string]struct {
					Properties           map[string]any `json:"properties"`
					AdditionalProperties *bool          `json:"additionalProperties"`
				} `json:"properties"`
			} `json:"upstreams"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	tables := schema.Properties.Upstreams.Properties
	known := config.FormatTableKeys()
	if len(tables) != len(known) {
		t.Errorf("schema has %d format tables, the proxy knows %d", len(tables), len(known))
	}
	for table, keys := range known {
		s, ok := tables[table]
		if !ok {
			t.Errorf("schema lacks upstreams.%s", table)
			continue
		}
		var got []string
		for k := range s.Properties {
			got = append(got, k)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, want) {
			t.Errorf("upstreams.%s accepts %q, the proxy knows %q", table, got, want)
		}
		if s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("upstreams.%s accepts unknown keys", table)
		}
	}
}

// TestShowReadme: `helm show readme` has something to show, including the
// step nothing else does for the user: building the image.
func TestShowReadme(t *testing.T) {
	out, err := helm(t, nil, "show", "readme", chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# nora-breaker", "docker build", "image.repository", "helm test"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm show readme lacks %q", want)
		}
	}
}
