#!/usr/bin/env bash
# Builds the root file system of the deployment tests' real systemd host
# (internal/systemdtest): Debian bookworm made by debootstrap from this
# machine's own apt mirror, with systemd, dbus, OpenSSH's server and Debian's
# Nix. Each test boots it with systemd-nspawn --boot on an overlay, so the
# tree built here is never written to after the build.
#
# The result is cached under FLEET_CACHE_DIR (default
# ~/.cache/terraform-provider-fleet) keyed by $version: bump it whenever what
# is installed or configured below changes, and the next run rebuilds.
# FLEET_DEBIAN_MIRROR overrides the mirror read from /etc/apt.
#
# Prints the absolute path of the root file system on stdout; progress goes
# to stderr. With --check it builds nothing: it prints the path when the
# tree is built, else says how to build it and exits 1.
set -euo pipefail

version="bookworm-2"
suite="bookworm"
# libdbi-perl provides perl-dbdabi-94, a virtual package nix-bin needs
# (through libdbd-sqlite3-perl) that debootstrap's resolver cannot find.
include="systemd,systemd-sysv,dbus,openssh-server,nix-bin,libdbi-perl"
cache="${FLEET_CACHE_DIR:-$HOME/.cache/terraform-provider-fleet}"
dir="$cache/systemd-rootfs-$version"
root="$dir/rootfs"

built() { [ -f "$dir/complete" ] && [ -x "$root/lib/systemd/systemd" ]; }

if [ "${1:-}" = --check ]; then
  built || { echo "build-systemd-rootfs: $root is not built: run make setup (scripts/build-systemd-rootfs.sh)" >&2; exit 1; }
  echo "$root"
  exit 0
fi
[ $# -eq 0 ] || { echo "usage: $0 [--check]" >&2; exit 2; }

if built; then
  echo "$root"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || { echo "build-systemd-rootfs: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "build-systemd-rootfs: debootstrap not found: install Debian package debootstrap" >&2; exit 1; }

# mirror prints the URI this machine's apt takes $suite from: the first
# deb822 stanza (*.sources) or one-line entry (sources.list, *.list) of type
# deb for that exact suite. debootstrap must use it and nothing else: the
# machine may reach no other address.
mirror() {
  if [ -n "${FLEET_DEBIAN_MIRROR:-}" ]; then
    echo "$FLEET_DEBIAN_MIRROR"
    return
  fi
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v suite="$suite" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && enabled != "no" && uri != "") { print uri; found = 1; exit }
        types = ""; suites = ""; uri = ""; enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      tolower($1) == "types:" { $1 = ""; types = $0; sub(/^ +/, "", types) }
      tolower($1) == "uris:" { uri = $2 }
      tolower($1) == "suites:" { $1 = ""; suites = $0; sub(/^ +/, "", suites) }
      tolower($1) == "enabled:" { enabled = tolower($2) }
      END { if (!found) flush() }
    ' "$f"
  done | head -n 1 | grep . && return
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # deb [options] URI SUITE COMPONENTS...
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk -v suite="$suite" '$1 == "deb" && $3 == suite { print $2; exit }'
  done | head -n 1 | grep . && return
  return 1
}

uri=$(mirror) || { echo "build-systemd-rootfs: no apt source of type deb for suite $suite in /etc/apt (set FLEET_DEBIAN_MIRROR to this machine's Debian mirror)" >&2; exit 1; }

mkdir -p "$cache"
exec 9>"$cache/systemd-rootfs.lock"
flock 9
if built; then # another run built it while this one waited
  echo "$root"
  exit 0
fi

work="$dir.tmp"
rm -rf "$work" "$dir"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

echo "build-systemd-rootfs: debootstrap $suite from $uri into $dir (takes a few minutes)" >&2
start=$(date +%s)
# debootstrap replaces start-stop-daemon in the tree by a stub while it
# installs, so no package script starts a daemon on this machine.
if ! debootstrap --variant=minbase --include="$include" "$suite" "$work/rootfs" "$uri" 2>&1 | tee "$work/debootstrap.log" >&2; then
  [ -f "$work/rootfs/debootstrap/debootstrap.log" ] && tail -n 30 "$work/rootfs/debootstrap/debootstrap.log" >&2
  echo "build-systemd-rootfs: debootstrap failed (see above)" >&2
  exit 1
fi

r="$work/rootfs"
# Each test writes its own host key, authorised key, sshd port and nix.conf
# into the overlay; none may be shared through the cached tree.
rm -f "$r"/etc/ssh/ssh_host_*
# An empty machine-id: systemd-nspawn gives each boot its own. debootstrap
# copies this machine's hostname and leaves no hosts file.
: >"$r/etc/machine-id"
echo fleet-systemd-host >"$r/etc/hostname"
printf '127.0.0.1 localhost\n::1 localhost\n127.0.1.1 fleet-systemd-host\n' >"$r/etc/hosts"
# A container has no consoles or hardware to wait for; these units would only
# slow the boot or fail it.
for unit in getty.target console-getty.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
  ln -sfn /dev/null "$r/etc/systemd/system/$unit"
done
# Debian's nix-bin leaves the store to be set up by root on first use. The
# tests write the Nix configuration (internal/nixtest.NixConfig).
# (Without /proc in the chroot, Nix's garbage collector library warns.)
chroot "$r" /usr/bin/env NIX_CONFIG="build-users-group =" /usr/bin/nix-store --init 2>"$work/nix-store-init.log" ||
  { cat "$work/nix-store-init.log" >&2; echo "build-systemd-rootfs: nix-store --init failed in the root file system" >&2; exit 1; }
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/*
[ -L "$r/etc/systemd/system/multi-user.target.wants/ssh.service" ] || { echo "build-systemd-rootfs: ssh.service is not enabled in the root file system" >&2; exit 1; }

echo "$version $suite $include $uri" >"$work/complete"
mv "$work" "$dir"
trap - EXIT
# Trees of other versions are stale.
for old in "$cache"/systemd-rootfs-*/; do
  [ "${old%/}" = "$dir" ] || { echo "build-systemd-rootfs: removing the stale ${old%/}" >&2; rm -rf "${old%/}"; }
done
echo "build-systemd-rootfs: built in $(($(date +%s) - start))s" >&2
echo "$root"
