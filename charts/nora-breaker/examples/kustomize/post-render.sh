#!/usr/bin/env bash
# Helm post-renderer: `helm upgrade --install nora <official NORA chart>
#   --post-renderer ./post-render.sh` pipes the rendered manifests through
# this kustomization (needs kubectl >= 1.27 for `kubectl kustomize`). It
# works on a copy in a temporary directory, so a nora.yaml rendered by hand
# next to this script (README step 2a) is never overwritten.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/kustomization.yaml" "$here/sidecar-patch.yaml" "$work/"
cat > "$work/nora.yaml"
kubectl kustomize "$work"
