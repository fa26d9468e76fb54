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
{{- end -}}

{{/*
nora-breaker.caKeyInitContainer: copies the CA key out of its Secret into
the memory-backed ca-key volume as a 0400 file owned by the proxy's user.
A Secret volume alone cannot give that: its files belong to root, and with
an fsGroup the kubelet adds group read, which the proxy rightly refuses.
This container runs as the proxy's user and reads the Secret through the
pod's fsGroup, so it must come before the sidecar.
*/}}
{{- define "nora-breaker.caKeyInitContainer" -}}
{{- $root := .root -}}
{{- $kc := $root.Values.ca.keyCopier -}}
- name: ca-key
  # The proxy's own image: "ca install-key" checks the key parses and writes
  # an owner-only copy, so no second image (and no shell) is needed.
  image: {{ include "nora-breaker.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args:
    - ca
    - install-key
    - --from
    - /ca-secret/ca-key.pem
    - --to
    - /ca-key/ca-key.pem
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
{{- end -}}

{{/* The pod volumes nora-breaker.sidecarContainer and the key copier mount. */}}
{{- define "nora-breaker.volumes" -}}
{{- $root := .root -}}
{{- $sc := $root.Values.sidecar -}}
- name: config
  configMap:
    name: {{ include "nora-breaker.configMapName" $root }}
{{- if $root.Values.ca.enabled }}
- name: ca-cert
  secret:
    secretName: {{ include "nora-breaker.caSecretName" $root }}
    defaultMode: 0444
    items:
      - key: {{ include "nora-breaker.caCertKey" $root }}
        path: ca.pem
- name: ca-secret
  secret:
    secretName: {{ include "nora-breaker.caSecretName" $root }}
    # 0400; the kubelet widens it to 0440 for the pod's fsGroup, which is
    # what lets the non-root key copier read it.
    defaultMode: 0400
    items:
      - key: {{ include "nora-breaker.caKeyKey" $root }}
        path: ca-key.pem
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
{{- end -}}
