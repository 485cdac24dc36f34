#!/usr/bin/env bash
# Builds goreleaser from its Go module and caches the binary, as
# scripts/build-tofu.sh does for OpenTofu: go install of
# github.com/goreleaser/goreleaser/v2 at GORELEASER_VERSION, cached under
# FLEET_CACHE_DIR (default ~/.cache/terraform-provider-fleet) keyed by
# version; a second run prints the cached path at once. The first build
# takes about 15 minutes on two busy cores (it has many dependencies).
#
# Prints the absolute path of the goreleaser binary on stdout; progress goes
# to stderr.
set -euo pipefail

version="${GORELEASER_VERSION:-2.15.1}"
cache="${FLEET_CACHE_DIR:-$HOME/.cache/terraform-provider-fleet}"
bin="$cache/goreleaser-$version/goreleaser"

if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "GitVersion: *v\?$version\$"; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "build-goreleaser: go is not on PATH" >&2; exit 1; }

echo "build-goreleaser: building goreleaser $version from its Go module (takes several minutes)" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$bin")"
# Outside any module, so the provider's go.mod plays no part.
(cd "$work" && GOBIN="$work/bin" GOFLAGS=-mod=mod CGO_ENABLED=0 \
  go install -trimpath -ldflags "-s -w" "github.com/goreleaser/goreleaser/v2@v$version")
mv "$work/bin/goreleaser" "$bin"
"$bin" --version 2>/dev/null | grep "GitVersion" >&2 || true
echo "$bin"
