#!/usr/bin/env bash
# Builds a release binary of the CLI with its version and VCS revision
# stamped, so `troupe version` says what it is, and beside it troupe-ml,
# the model tools troupe runs (troupe eval, plot, ...):
#
#   scripts/release.sh                  # bin/troupe and bin/troupe-ml, version from git describe
#   TROUPE_VERSION=v0.4.0 scripts/release.sh -o /tmp/troupe   # and /tmp/troupe-ml
#
# The version is TROUPE_VERSION, else `git describe --tags --always
# --dirty` (a tag, or the abbreviated commit when there is none).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bin/troupe
if [ "${1:-}" = "-o" ]; then out=$2; fi
ml="$(dirname "$out")/troupe-ml"
version=${TROUPE_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
revision=$(git rev-parse HEAD 2>/dev/null || true)
# go-nvml's cgo code uses declarations newer CUDA headers deprecate: quiet.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}"
CGO_ENABLED=1 go build -trimpath -buildvcs=auto \
  -ldflags "-X main.version=$version -X main.revision=$revision" -o "$out" ./cmd/troupe
CGO_ENABLED=1 go build -trimpath -buildvcs=auto -o "$ml" ./cmd/troupe-ml
echo "release: $("$out" version) -> $out (model tools: $ml)"
