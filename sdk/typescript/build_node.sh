#!/usr/bin/env bash
# Builds the SDK for Node 20 as one ES module with zod inlined:
#   bash sdk/typescript/build_node.sh [OUTPUT]     (default: sdk/typescript/dist/orbit-sdk.mjs)
# Also writes the type declarations beside it (orbit-sdk.d.mts). dist/ is a build output: do not
# commit it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/dist/orbit-sdk.mjs}"
mkdir -p "$(dirname "$out")"
# Run from the SDK's folder so that deno finds the repository's deno.json (it maps "zod").
cd "$here"
deno bundle --quiet --platform=node --format=esm --packages=bundle --declaration -o "$out" mod.ts
# The bundle must not need anything from node_modules: every import is inlined.
if grep -Eq '^\s*import .* from "(zod|npm:)' "$out"; then
  echo "build_node.sh: $out still imports a package" >&2
  exit 1
fi
echo "built $out"
