#!/usr/bin/env bash
# Helm post-renderer: `helm upgrade --install nora <official NORA chart>
#   --post-renderer ./post-render.sh` pipes the rendered manifests through
# this kustomization (needs kubectl >= 1.27 for `kubectl kustomize`).
set -euo pipefail
cd "$(dirname "$0")"
cat > nora.yaml
kubectl kustomize .
rm -f nora.yaml
