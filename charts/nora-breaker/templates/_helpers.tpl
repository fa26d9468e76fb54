{{/* Names, labels and small derived values shared by every template. */}}

{{- define "nora-breaker.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nora-breaker.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nora-breaker.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The component the pods of this mode run: the proxy alone, or NORA. */}}
{{- define "nora-breaker.component" -}}
{{- if eq .Values.mode "nora" }}nora{{ else }}proxy{{ end -}}
{{- end -}}

{{- define "nora-breaker.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nora-breaker.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ include "nora-breaker.component" . }}
{{- end -}}

{{- define "nora-breaker.labels" -}}
helm.sh/chart: {{ include "nora-breaker.chart" . }}
{{ include "nora-breaker.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "nora-breaker.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "nora-breaker.configMapName" -}}
{{- printf "%s-config" (include "nora-breaker.fullname" .) -}}
{{- end -}}

{{/* The Secret that holds the CA pair: the user's, or the generated one. */}}
{{- define "nora-breaker.caSecretName" -}}
{{- default (printf "%s-ca" (include "nora-breaker.fullname" .)) .Values.ca.existingSecret -}}
{{- end -}}

{{- define "nora-breaker.caCertConfigMapName" -}}
{{- printf "%s-ca-cert" (include "nora-breaker.fullname" .) -}}
{{- end -}}

{{/*
The Secret holding the admin token and the key it is under: the user's
existing Secret, or the chart's own (generated, or from adminToken.token).
*/}}
{{- define "nora-breaker.adminTokenSecretName" -}}
{{- default (printf "%s-admin-token" (include "nora-breaker.fullname" .)) .Values.sidecar.adminToken.existingSecret -}}
{{- end -}}
{{- define "nora-breaker.adminTokenKey" -}}
{{- if .Values.sidecar.adminToken.existingSecret }}{{ .Values.sidecar.adminToken.key }}{{ else }}token{{ end -}}
{{- end -}}

{{/* Where the config and the CA files appear inside every container. */}}
{{- define "nora-breaker.configPath" -}}/etc/nora/config.toml{{- end -}}
{{- define "nora-breaker.caCertPath" -}}/etc/nora-breaker/ca/ca.pem{{- end -}}
{{- define "nora-breaker.caKeyPath" -}}/etc/nora-breaker/key/ca-key.pem{{- end -}}
{{- define "nora-breaker.upstreamCAPath" -}}/etc/nora-breaker/upstream-ca/ca.pem{{- end -}}
{{- define "nora-breaker.staleDir" -}}/var/cache/nora-breaker{{- end -}}

{{/*
deny_unlisted: explicit value wins; otherwise on in standalone mode, where
the proxy port is reachable from the whole cluster, and off next to NORA.
*/}}
{{- define "nora-breaker.denyUnlisted" -}}
{{- if kindIs "bool" .Values.sidecar.denyUnlisted -}}
{{- .Values.sidecar.denyUnlisted -}}
{{- else -}}
{{- eq .Values.mode "standalone" -}}
{{- end -}}
{{- end -}}

{{/* The pod-template annotation that rolls pods when config.toml changes. */}}
{{- define "nora-breaker.checksumAnnotation" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end -}}

{{/* Key names inside the CA Secret: the generated one always uses tls.*. */}}
{{- define "nora-breaker.caCertKey" -}}
{{- if .Values.ca.existingSecret }}{{ .Values.ca.certKey }}{{ else }}tls.crt{{ end -}}
{{- end -}}
{{- define "nora-breaker.caKeyKey" -}}
{{- if .Values.ca.existingSecret }}{{ .Values.ca.keyKey }}{{ else }}tls.key{{ end -}}
{{- end -}}
