#!/usr/bin/env bash
# Builds the OpenTofu CLI from its Go module and caches the binary.
#
# `go install github.com/opentofu/opentofu/cmd/tofu@vX` is refused because the
# module's go.mod carries replace directives, so the module is downloaded and
# built inside its own directory instead. The result is cached under
# FLEET_CACHE_DIR (default ~/.cache/terraform-provider-fleet) keyed by version;
# a second run prints the cached path at once.
#
# Prints the absolute path of the tofu binary on stdout; progress goes to stderr.
set -euo pipefail

version="${TOFU_VERSION:-1.12.6}"
cache="${FLEET_CACHE_DIR:-$HOME/.cache/terraform-provider-fleet}"
bin="$cache/tofu-$version/tofu"

if [ -x "$bin" ] && TF_CLI_CONFIG_FILE=/dev/null "$bin" version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "build-tofu: go is not on PATH" >&2; exit 1; }

echo "build-tofu: building OpenTofu $version from its Go module (takes several minutes)" >&2
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# Download the module source into the module cache, then copy it out so it is
# writable and its own go.mod (with the replace directives) is the main module.
dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/opentofu/opentofu@v$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] && [ -d "$dir" ] || { echo "build-tofu: could not download github.com/opentofu/opentofu@v$version" >&2; exit 1; }
cp -R "$dir" "$work/src"
chmod -R u+w "$work/src"

mkdir -p "$(dirname "$bin")"
# version.dev=no makes the binary report a release version, not "-dev", so
# version gates (write-only attributes need >= 1.11) compare it correctly.
(cd "$work/src" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
  -o "$bin.tmp" ./cmd/tofu)
mv "$bin.tmp" "$bin"
TF_CLI_CONFIG_FILE=/dev/null "$bin" version | head -1 >&2
echo "$bin"
