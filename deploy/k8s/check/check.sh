#!/bin/sh
# Validates deploy/k8s/*.yaml (deploy/k8s/check/validate.mjs): every
# object against the Kubernetes API schemas of npm's kubernetes-models,
# plus resources, security contexts and probes.  The npm packages go into
# DIR (default: build/k8s-check), installed by name on first use.
#   check.sh [DIR]   exit 0 valid, 1 a finding, 77 no node/npm to run it
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/../../../build/k8s-check}
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "SKIP: node and npm are needed for the schema check" >&2
    exit 77
fi
mkdir -p "$dir"
if [ ! -d "$dir/node_modules/kubernetes-models" ] ||
    [ ! -d "$dir/node_modules/yaml" ]; then
    npm install --no-audit --no-fund --silent --prefix "$dir" \
        kubernetes-models@5 yaml@2 >/dev/null
fi
cp "$here/validate.mjs" "$dir/validate.mjs"
cd "$dir"
exec node validate.mjs "$here"/../*.yaml
