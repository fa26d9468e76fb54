{{/*
A small TOML writer for values that mirror NORA's config.toml. Strings are
written with toJson: a JSON string is also a valid TOML basic string. Null
values are skipped, so a key can be removed with --set key=null.
*/}}

{{/* A key, bare when TOML allows it, else quoted. */}}
{{- define "nora-breaker.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{/* A value written inline: scalar, [array] or { inline table }. */}}
{{- define "nora-breaker.tomlInline" -}}
{{- if kindIs "map" . -}}
{ {{- $first := true -}}
{{- range $k, $v := . -}}{{- if not (kindIs "invalid" $v) -}}
{{- if not $first }},{{ end }} {{ include "nora-breaker.tomlKey" $k }} = {{ include "nora-breaker.tomlInline" $v -}}
{{- $first = false -}}
{{- end -}}{{- end }} }
{{- else if kindIs "slice" . -}}
[{{- range $i, $v := . -}}{{ if $i }}, {{ end }}{{ include "nora-breaker.tomlInline" $v }}{{- end -}}]
{{- else if kindIs "float64" . -}}
{{- /* YAML numbers arrive as float64; whole numbers must stay integers. */ -}}
{{- if eq (floor .) . }}{{ int64 . }}{{ else }}{{ . }}{{ end -}}
{{- else -}}
{{- toJson . -}}
{{- end -}}
{{- end -}}

{{/*
A table and, recursively, its sub-tables. Input: dict "name" (dotted TOML
path) "table" (map). Scalars and arrays first; a list of maps under the key
"upstreams" becomes an array of tables ([[docker.upstreams]]), as NORA's
documentation writes it; nested maps become [name.key] tables.
*/}}
{{- define "nora-breaker.tomlTable" -}}
{{- $name := .name -}}
{{- $t := .table -}}
[{{ $name }}]
{{- range $k, $v := $t }}
{{- if and (not (kindIs "invalid" $v)) (not (kindIs "map" $v)) (not (and (eq $k "upstreams") (kindIs "slice" $v))) }}
{{ include "nora-breaker.tomlKey" $k }} = {{ include "nora-breaker.tomlInline" $v }}
{{- end }}
{{- end }}
{{- if kindIs "slice" $t.upstreams }}
{{- range $u := $t.upstreams }}

[[{{ $name }}.upstreams]]
{{- range $k, $v := $u }}
{{- if not (kindIs "invalid" $v) }}
{{ include "nora-breaker.tomlKey" $k }} = {{ include "nora-breaker.tomlInline" $v }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $k, $v := $t }}
{{- if kindIs "map" $v }}

{{ include "nora-breaker.tomlTable" (dict "name" (printf "%s.%s" $name (include "nora-breaker.tomlKey" $k)) "table" $v) }}
{{- end }}
{{- end }}
{{- end -}}
