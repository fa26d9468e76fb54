#!/usr/bin/env bash
# Chart and image checks, run by CI from a fresh clone: installs helm when it
# is missing, lints and renders the chart with every values file in
# charts/nora-breaker/ci/, then runs the Go tests in charts/test (strict
# decoding into the Kubernetes API types, check-config on the rendered
# config.toml, sidecar order and CA wiring, schema rejections and guards,
# lookups and NOTES against a fake API server on loopback, the helm test
# hook run against a real proxy, promtool check/test rules on the rendered
# PrometheusRule). Installs Debian's prometheus package for promtool when
# it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
helm="$root/.tools/helm"
chart=charts/nora-breaker
. scripts/lib.sh

install_helm "$root/.tools"
if ! command -v promtool >/dev/null; then
  echo "== install promtool (Debian's prometheus package; its service is never started)"
  apt_install prometheus
fi
"$helm" version --short

# A helm built with go install assumes Kubernetes 1.20, below the chart's
# kubeVersion; lint and render for a current cluster instead.
kube=1.31.0
for values in "$chart"/ci/*.yaml; do
  echo "== helm lint / template: $values"
  "$helm" lint --strict "$chart" -f "$values" --kube-version "$kube"
  "$helm" template ci "$chart" --namespace build -f "$values" --kube-version "$kube" > /dev/null
done

echo "== chart tests (charts/test)"
cd charts/test
retry 300 go mod download
go vet ./...
HELM="$helm" go test -count=1 -timeout 15m ./...
