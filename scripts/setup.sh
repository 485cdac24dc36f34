#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine, and
# fails loudly naming whatever it cannot provide. Idempotent: a second run
# only checks.
#   - Debian packages: openssh-server (sshd for real test hosts),
#     openssh-client, nix-bin, iproute2, util-linux (unshare and nsenter for
#     the storage faults of node health tests), nodejs (an ECMA-262 engine:
#     the published ssh_opts pattern is tested in it), git, make,
#     ca-certificates, and a C
#     toolchain (gcc, libc6-dev), which the race detector (go test -race) needs,
#     debootstrap and systemd-container (systemd-nspawn) for the real
#     systemd host of the deployment tests, unzip (make
#     release-snapshot lists the archives it built), and jq (the NixOS
#     configurations guide's CI jobs read the saved plan with it)
#   - Go modules of the provider and of tools/
#   - OpenTofu, built from its Go module by scripts/build-tofu.sh (cached)
#   - the real systemd host's Debian root file system, made by
#     scripts/build-systemd-rootfs.sh with debootstrap from this machine's
#     apt mirror (cached)
#   - Terraform must already be on the machine image (it is not in Debian)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(openssh-server openssh-client nix-bin iproute2 util-linux nodejs git make ca-certificates gcc libc6-dev debootstrap systemd-container sudo unzip jq)
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
command -v systemd-nspawn >/dev/null || { echo "setup: systemd-nspawn missing after installing systemd-container" >&2; exit 1; }

# make sandbox needs only the packages and the provider's modules: not
# OpenTofu, PostgreSQL or the systemd host's root file system.
if [ "${SETUP_FOR:-}" = sandbox ]; then
  command -v go >/dev/null || { echo "setup: go is not on PATH" >&2; exit 1; }
  go mod download
  echo "setup: done (for the sandbox)" >&2
  exit 0
fi

# PostgreSQL for the pg state backend tests (two applies at once): the
# machine image has it with initdb and pg_ctl on PATH; Debian's package
# keeps them in /usr/lib/postgresql/<version>/bin.
if ! command -v initdb >/dev/null || ! command -v pg_ctl >/dev/null; then
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null || { echo "setup: PostgreSQL (initdb, pg_ctl) missing: install Debian package postgresql as root" >&2; exit 1; }
    echo "setup: installing postgresql" >&2
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    rm -f /usr/sbin/policy-rc.d
  fi
  bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")
  ln -sf "$bin/initdb" /usr/local/bin/initdb
  ln -sf "$bin/pg_ctl" /usr/local/bin/pg_ctl
  ln -sf "$bin/postgres" /usr/local/bin/postgres
fi
id postgres >/dev/null 2>&1 || { echo "setup: no postgres user (Debian package postgresql creates it)" >&2; exit 1; }

command -v go >/dev/null || { echo "setup: go is not on PATH" >&2; exit 1; }
if ! command -v terraform >/dev/null; then
  echo "setup: terraform is not on PATH; the machine image provides Terraform 1.11 (it is not a Debian package)" >&2
  exit 1
fi

command -v gcc >/dev/null || { echo "setup: gcc is missing after installing it; go test -race needs a C toolchain" >&2; exit 1; }

go mod download
(cd tools && go mod download)
tofu="${FLEET_TOFU_PATH:-$(scripts/build-tofu.sh)}"
[ -x "$tofu" ] || { echo "setup: FLEET_TOFU_PATH=$tofu is not an executable OpenTofu" >&2; exit 1; }
rootfs=$(scripts/build-systemd-rootfs.sh)
[ -x "$rootfs/lib/systemd/systemd" ] || { echo "setup: $rootfs is not the systemd host's root file system" >&2; exit 1; }
# The CLIs' version lines, read with an empty CLI configuration: a
# TF_CLI_CONFIG_FILE naming a missing file makes them print a warning first.
version() { TF_CLI_CONFIG_FILE="$PWD/.ci/empty.tfrc" "$@" version | head -1; }
echo "setup: ready ($(version terraform); $(version "$tofu"))" >&2
