{{/*
A small TOML writer for values that mirror NORA's config.toml. Strings are
written with toJson: a JSON string is also a valid TOML basic string. Null
values are skipped, so a key can be removed with --set key=null. Keys come
out sorted, except that "url" always leads, as people write upstreams.
*/}}

{{/* A key, bare when TOML allows it, else quoted. */}}
{{- define "nora-breaker.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{/* The keys of a map with non-null values, "url" first. */}}
{{- define "nora-breaker.tomlKeys" -}}
{{- $keys := list -}}
{{- if and (hasKey . "url") (not (kindIs "invalid" .url)) }}{{ $keys = append $keys "url" }}{{ end -}}
{{- range $k, $v := . -}}
{{- if and (ne $k "url") (not (kindIs "invalid" $v)) }}{{ $keys = append $keys $k }}{{ end -}}
{{- end -}}
{{- toJson $keys -}}
{{- end -}}

{{/* A value written inline: scalar, [array] or { inline table }. */}}
{{- define "nora-breaker.tomlInline" -}}
{{- $m := . -}}
{{- if kindIs "map" $m -}}
{ {{- range $i, $k := include "nora-breaker.tomlKeys" $m | fromJsonArray -}}
{{- if $i }},{{ end }} {{ include "nora-breaker.tomlKey" $k }} = {{ include "nora-breaker.tomlInline" (index $m $k) -}}
{{- end }} }
{{- else if kindIs "slice" $m -}}
[{{- range $i, $v := $m -}}{{ if $i }}, {{ end }}{{ include "nora-breaker.tomlInline" $v }}{{- end -}}]
{{- else if kindIs "float64" $m -}}
{{- /* YAML numbers arrive as float64; whole numbers must stay integers. */ -}}
{{- if eq (floor $m) $m }}{{ int64 $m }}{{ else }}{{ $m }}{{ end -}}
{{- else -}}
{{- toJson $m -}}
{{- end -}}
{{- end -}}

{{/*
A table and its sub-tables. Input: dict "name" (dotted TOML path), "table"
(map) and "depth" (0 for a top-level table). Plain keys come first; a list
of maps under "upstreams" becomes an array of tables ([[docker.upstreams]]),
as NORA's documentation writes it; a map becomes a [name.key] table one
level down ([rpm.proxies], [auth.oidc]) and an inline table below that
(a repository's { url, auth }). A header with nothing of its own under it
is left out: its sub-tables define it.
*/}}
{{- define "nora-breaker.tomlTable" -}}
{{- $name := .name -}}
{{- $t := .table -}}
{{- $depth := .depth | default 0 -}}
{{- $plain := list -}}
{{- $subs := list -}}
{{- range $k := include "nora-breaker.tomlKeys" $t | fromJsonArray -}}
{{- $v := index $t $k -}}
{{- if and (eq $k "upstreams") (kindIs "slice" $v) -}}
{{- else if and (kindIs "map" $v) (lt (int $depth) 1) -}}{{ $subs = append $subs $k }}
{{- else -}}{{ $plain = append $plain $k }}
{{- end -}}
{{- end -}}
{{- $upstreams := list -}}
{{- if kindIs "slice" $t.upstreams }}{{ $upstreams = $t.upstreams }}{{ end -}}
{{- if or $plain (not (or $subs $upstreams)) }}
[{{ $name }}]
{{- range $k := $plain }}
{{ include "nora-breaker.tomlKey" $k }} = {{ include "nora-breaker.tomlInline" (index $t $k) }}
{{- end }}
{{- end }}
{{- range $u := $upstreams }}

[[{{ $name }}.upstreams]]
{{- range $k := include "nora-breaker.tomlKeys" $u | fromJsonArray }}
{{ include "nora-breaker.tomlKey" $k }} = {{ include "nora-breaker.tomlInline" (index $u $k) }}
{{- end }}
{{- end }}
{{- range $k := $subs }}

{{ include "nora-breaker.tomlTable" (dict "name" (printf "%s.%s" $name (include "nora-breaker.tomlKey" $k)) "table" (index $t $k) "depth" (add1 (int $depth))) | trim }}
{{- end }}
{{- end -}}
