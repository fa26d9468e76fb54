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

{{/* The labels of the helm test pod: the release's, another component. */}}
{{- define "nora-breaker.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "nora-breaker.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: helm-test
{{- end -}}

{{- define "nora-breaker.labels" -}}
helm.sh/chart: {{ include "nora-breaker.chart" . }}
{{ include "nora-breaker.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Whether NORA's data claim can be mounted on one node at a time only
(ReadWriteOnce, ReadWriteOncePod): such a claim allows one replica, and
the old pod must let go of it before the new one starts.
*/}}
{{- define "nora-breaker.singleNodeClaim" -}}
{{- $p := .Values.nora.persistence -}}
{{- if and $p.enabled (or (has "ReadWriteOnce" $p.accessModes) (has "ReadWriteOncePod" $p.accessModes)) }}true{{ end -}}
{{- end -}}

{{/* The replicas of the Deployment this mode renders. */}}
{{- define "nora-breaker.replicas" -}}
{{- if eq .Values.mode "nora" }}{{ .Values.nora.replicaCount }}{{ else }}{{ .Values.replicaCount }}{{ end -}}
{{- end -}}

{{- define "nora-breaker.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nora-breaker.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Whether the admin port is on the main Service: always for a ClusterIP,
which only the cluster reaches; on a LoadBalancer or NodePort only when
service.exposeAdminPort says so, else it gets a ClusterIP Service of its own.
*/}}
{{- define "nora-breaker.adminOnMainService" -}}
{{- if or (eq .Values.service.type "ClusterIP") .Values.service.exposeAdminPort }}true{{ end -}}
{{- end -}}

{{/* The Service that carries the admin port. */}}
{{- define "nora-breaker.adminServiceName" -}}
{{- if include "nora-breaker.adminOnMainService" . -}}
{{- include "nora-breaker.fullname" . -}}
{{- else -}}
{{- printf "%s-metrics" (include "nora-breaker.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
The pods' topologySpreadConstraints: the user's, each given the pods' own
labelSelector when it has none; else, with defaultSpread and more than one
replica, a soft spread across nodes and zones (ScheduleAnyway never keeps a
pod from running where the scheduler can only put it on a crowded node).
*/}}
{{- define "nora-breaker.topologySpread" -}}
{{- $selector := dict "matchLabels" (include "nora-breaker.selectorLabels" . | fromYaml) -}}
{{- $out := list -}}
{{- range .Values.topologySpreadConstraints -}}
{{- $c := deepCopy . -}}
{{- if not (hasKey $c "labelSelector") }}{{ $_ := set $c "labelSelector" $selector }}{{ end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- if and (not $out) .Values.defaultSpread (gt (int (include "nora-breaker.replicas" .)) 1) -}}
{{- range $key := list "kubernetes.io/hostname" "topology.kubernetes.io/zone" -}}
{{- $out = append $out (dict "maxSkew" 1 "topologyKey" $key "whenUnsatisfiable" "ScheduleAnyway" "labelSelector" $selector) -}}
{{- end -}}
{{- end -}}
{{- with $out -}}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/*
GOMEMLIMIT for the proxy: sidecar.goMemLimitPercent of its memory limit,
in bytes, or nothing when there is no limit, the percentage is 0 or the
environment already sets it. A limit written in a form the chart cannot
convert stops the render rather than guessing.
*/}}
{{- define "nora-breaker.goMemLimit" -}}
{{- $sc := .Values.sidecar -}}
{{- $raw := "" -}}
{{- with $sc.resources }}{{ with .limits }}{{ with .memory }}{{ $raw = . }}{{ end }}{{ end }}{{ end -}}
{{- $set := false -}}
{{- range concat (.Values.sharedEnv | default list) ($sc.extraEnv | default list) }}{{ if eq .name "GOMEMLIMIT" }}{{ $set = true }}{{ end }}{{ end -}}
{{- if and $raw (gt (int $sc.goMemLimitPercent) 0) (not $set) -}}
{{- $limit := ternary $raw (printf "%.0f" (float64 $raw)) (kindIs "string" $raw) -}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$" $limit) -}}
{{- fail (printf "sidecar.resources.limits.memory %q: cannot derive GOMEMLIMIT from it; write it as e.g. 256Mi, or set sidecar.goMemLimitPercent to 0" $limit) -}}
{{- end -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $limit -}}
{{- $unit := trimPrefix $number $limit -}}
{{- printf "%.0f" (floor (divf (mulf (float64 $number) (index $units $unit) (int $sc.goMemLimitPercent)) 100)) -}}
{{- end -}}
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

{{/*
The pod-template annotations that roll the pods. configChange roll (and
mode nora, whose NORA reads its tables only at start): a checksum of the
whole config.toml. configChange reload: a checksum of only the values
behind the [sidecar] settings a running proxy cannot reload (docs/
behaviour.md §2.3 lists them; the ports, the CA, the stale volume and the
shared-state password reach the pod template by themselves). With an
existing CA Secret, its certificate's checksum, so an upgrade after the CA
was renewed rolls the pods onto it.
*/}}
{{- define "nora-breaker.checksumAnnotation" -}}
{{- if or (eq .Values.mode "nora") (eq .Values.configChange "roll") -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- else -}}
{{- $sc := .Values.sidecar -}}
{{- $restart := dict "staleMaxBytes" $sc.stale.maxBytes "staleMaxObjectBytes" $sc.stale.maxObjectBytes
  "idleTimeout" $sc.idleTimeout "maxConnections" $sc.maxConnections "procs" $sc.procs "logLevel" $sc.logLevel
  "logFormat" $sc.logFormat "sharedState" $sc.sharedState.url
  "sharedStatePrefix" (ternary $sc.sharedState.prefix "" (ne $sc.sharedState.url "")) }}
checksum/restart-settings: {{ toJson $restart | sha256sum }}
{{- end }}
{{- with include "nora-breaker.existingCACert" . }}
checksum/ca: {{ . | sha256sum }}
{{- end }}
{{- end -}}

{{/*
The certificate of an existing CA Secret: ca.certificate when given (for
offline rendering), else read from the Secret with lookup; empty when
neither is known or the chart generates the CA.
*/}}
{{- define "nora-breaker.existingCACert" -}}
{{- if and .Values.ca.enabled .Values.ca.existingSecret -}}
{{- if .Values.ca.certificate -}}
{{- .Values.ca.certificate -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace .Values.ca.existingSecret -}}
{{- if and $existing $existing.data (index $existing.data .Values.ca.certKey) -}}
{{- index $existing.data .Values.ca.certKey | b64dec -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Key names inside the CA Secret: the generated one always uses tls.*. */}}
{{- define "nora-breaker.caCertKey" -}}
{{- if .Values.ca.existingSecret }}{{ .Values.ca.certKey }}{{ else }}tls.crt{{ end -}}
{{- end -}}
{{- define "nora-breaker.caKeyKey" -}}
{{- if .Values.ca.existingSecret }}{{ .Values.ca.keyKey }}{{ else }}tls.key{{ end -}}
{{- end -}}
