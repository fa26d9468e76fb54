{{/*
nora-breaker.sidecarContainer: the proxy container, reusable by other charts
and by the standalone Deployment.

  {{- include "nora-breaker.sidecarContainer" (dict "root" $ "native" true) | nindent 8 }}

native=true renders it as a Kubernetes native sidecar (an init container with
restartPolicy Always): the kubelet starts it, waits for its startupProbe,
and only then starts the next container, so NORA never runs without its
proxy. The container expects the volumes of nora-breaker.volumes.
*/}}
{{- define "nora-breaker.sidecarContainer" -}}
{{- $root := .root -}}
{{- $sc := $root.Values.sidecar -}}
- name: nora-breaker
  image: {{ include "nora-breaker.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  {{- if .native }}
  restartPolicy: Always
  {{- end }}
  args: ["serve"]
  env:
    - name: NORA_CONFIG_PATH
      value: {{ include "nora-breaker.configPath" $root }}
    {{- if $sc.adminToken.enabled }}
    # The admin API's bearer token (admin-token.yaml), never in the ConfigMap.
    - name: NORA_SIDECAR_ADMIN_TOKEN
      valueFrom:
        secretKeyRef:
          name: {{ include "nora-breaker.adminTokenSecretName" $root }}
          key: {{ include "nora-breaker.adminTokenKey" $root }}
    {{- end }}
    {{- if and $sc.sharedState.url $sc.sharedState.existingSecret }}
    - name: NORA_SIDECAR_SHARED_STATE_PASSWORD
      valueFrom:
        secretKeyRef:
          name: {{ $sc.sharedState.existingSecret }}
          key: {{ $sc.sharedState.passwordKey }}
    {{- end }}
    {{- if and $sc.parentProxy.url $sc.parentProxy.existingSecret }}
    # The parent proxy's password, never in the ConfigMap.
    - name: NORA_SIDECAR_PARENT_PROXY_PASSWORD
      valueFrom:
        secretKeyRef:
          name: {{ $sc.parentProxy.existingSecret }}
          key: {{ $sc.parentProxy.passwordKey }}
    {{- end }}
    {{- with include "nora-breaker.goMemLimit" $root }}
    # The Go runtime's soft memory limit, under the container's hard one.
    - name: GOMEMLIMIT
      value: {{ . | quote }}
    {{- end }}
    {{- with $root.Values.sharedEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $sc.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $sc.extraEnvFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    {{- if not .native }}
    - name: proxy
      containerPort: {{ $sc.proxyPort }}
      protocol: TCP
    {{- end }}
    - name: metrics
      containerPort: {{ $sc.adminPort }}
      protocol: TCP
  startupProbe:
    httpGet:
      path: /ready
      port: metrics
    periodSeconds: 1
    failureThreshold: 30
  readinessProbe:
    httpGet:
      path: /ready
      port: metrics
    periodSeconds: {{ $sc.probes.periodSeconds }}
    timeoutSeconds: {{ $sc.probes.timeoutSeconds }}
    failureThreshold: {{ $sc.probes.failureThreshold }}
  livenessProbe:
    httpGet:
      path: /health
      port: metrics
    periodSeconds: {{ $sc.probes.periodSeconds }}
    timeoutSeconds: {{ $sc.probes.timeoutSeconds }}
    failureThreshold: {{ $sc.probes.failureThreshold }}
  {{- with $sc.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $sc.lifecycle }}
  lifecycle:
    {{- toYaml $sc.lifecycle | nindent 4 }}
  {{- else if not .native }}
  # Keep accepting while the endpoint is withdrawn from the Service; the
  # kubelet sends SIGTERM (and the proxy drains) after this returns. The
  # image has no shell, so the binary sleeps itself.
  lifecycle:
    preStop:
      exec:
        command: ["/nora-breaker", "sleep", "{{ int $sc.preStopSleepSeconds }}"]
  {{- end }}
  securityContext:
    {{- toYaml $sc.securityContext | nindent 4 }}
  volumeMounts:
    - name: config
      mountPath: /etc/nora
      readOnly: true
    {{- if $root.Values.ca.enabled }}
    - name: ca-cert
      mountPath: /etc/nora-breaker/ca
      readOnly: true
    - name: ca-key
      mountPath: /etc/nora-breaker/key
      readOnly: true
    {{- end }}
    {{- if $sc.upstreamCA.configMap }}
    - name: upstream-ca
      mountPath: /etc/nora-breaker/upstream-ca
      readOnly: true
    {{- end }}
    {{- if $sc.stale.enabled }}
    - name: stale
      mountPath: {{ include "nora-breaker.staleDir" $root }}
    {{- end }}
    {{- with $sc.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/*
nora-breaker.caKeyInitContainer: copies the CA pair out of its Secret into
memory-backed volumes: the key (ca-key) as a 0400 file owned by the proxy's
user, the certificate (ca-cert, also read by NORA) as 0444. A Secret volume
alone cannot give the key that: its files belong to root, and with an
fsGroup the kubelet adds group read, which the proxy rightly refuses. The
certificate is copied with it, checked to match, because a Secret volume
follows a renewed Secret and the key copy does not: every container of the
pod keeps the pair the pod started with, even after restarting. This
container runs as the proxy's user and reads the Secret through the pod's
fsGroup, so it must come before the sidecar.
*/}}
{{- define "nora-breaker.caKeyInitContainer" -}}
{{- $root := .root -}}
{{- $kc := $root.Values.ca.keyCopier -}}
- name: ca-key
  # The proxy's own image: "ca install-key" checks the pair and writes an
  # owner-only copy of the key, so no second image (and no shell) is needed.
  image: {{ include "nora-breaker.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args:
    - ca
    - install-key
    - --from
    - /ca-secret/ca-key.pem
    - --to
    - /ca-key/ca-key.pem
    - --cert-from
    - /ca-secret/ca.pem
    - --cert-to
    - /ca-cert/ca.pem
  {{- with $kc.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.sidecar.securityContext | nindent 4 }}
  volumeMounts:
    - name: ca-secret
      mountPath: /ca-secret
      readOnly: true
    - name: ca-key
      mountPath: /ca-key
    - name: ca-cert
      mountPath: /ca-cert
{{- end -}}

{{/* The pod volumes nora-breaker.sidecarContainer and the key copier mount. */}}
{{- define "nora-breaker.volumes" -}}
{{- $root := .root -}}
{{- $sc := $root.Values.sidecar -}}
- name: config
  configMap:
    name: {{ include "nora-breaker.configMapName" $root }}
{{- if $root.Values.ca.enabled }}
- name: ca-secret
  secret:
    secretName: {{ include "nora-breaker.caSecretName" $root }}
    # 0400; the kubelet widens it to 0440 for the pod's fsGroup, which is
    # what lets the non-root key copier read it.
    defaultMode: 0400
    items:
      - key: {{ include "nora-breaker.caCertKey" $root }}
        path: ca.pem
      - key: {{ include "nora-breaker.caKeyKey" $root }}
        path: ca-key.pem
# The copier's snapshot of the pair: the certificate for the proxy and NORA,
# the key for the proxy alone.
- name: ca-cert
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
- name: ca-key
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- if $sc.upstreamCA.configMap }}
- name: upstream-ca
  configMap:
    name: {{ $sc.upstreamCA.configMap }}
    items:
      - key: {{ $sc.upstreamCA.key }}
        path: ca.pem
{{- end }}
{{- if $sc.stale.enabled }}
- name: stale
  emptyDir:
    sizeLimit: {{ $sc.stale.volumeSizeLimit }}
{{- end }}
{{- with $root.Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}
