#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine, and
# fails loudly naming whatever it cannot provide. Idempotent: a second run
# only checks.
#   - Debian packages: openssh-server (sshd for real test hosts),
#     openssh-client, nix-bin, iproute2, git, make, ca-certificates
#   - Go modules of the provider and of tools/
#   - OpenTofu, built from its Go module by scripts/build-tofu.sh (cached)
#   - Terraform must already be on the machine image (it is not in Debian)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(openssh-server openssh-client nix-bin iproute2 git make ca-certificates)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "setup: missing Debian packages: ${missing[*]} (install them as root with apt-get)" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Keep package scripts from starting daemons: the tests start their own
  # sshd on loopback, and nothing may listen on other addresses.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -x /usr/sbin/sshd ] || { echo "setup: /usr/sbin/sshd missing after installing openssh-server" >&2; exit 1; }

command -v go >/dev/null || { echo "setup: go is not on PATH" >&2; exit 1; }
if ! command -v terraform >/dev/null; then
  echo "setup: terraform is not on PATH; the machine image provides Terraform 1.11 (it is not a Debian package)" >&2
  exit 1
fi

go mod download
(cd tools && go mod download)
scripts/build-tofu.sh >/dev/null
echo "setup: ready ($(terraform version | head -1); $("$(scripts/build-tofu.sh)" version | head -1))" >&2
