#!/usr/bin/env bash
# make demo: build the provider, start a sandbox of real SSH hosts on
# 127.0.0.1 with a flake of NixOS-like configurations for its deploy
# targets, apply examples/demo through dev_overrides, edit two of the
# configurations, show the records, the plan warnings and what the plan
# will build, apply again, and clean up. Uses OpenTofu when it has been built
# (scripts/build-tofu.sh), else Terraform; FLEET_DEMO_CLI chooses.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

cli="${FLEET_DEMO_CLI:-}"
if [ -z "$cli" ]; then
  tofu="${FLEET_CACHE_DIR:-$HOME/.cache/terraform-provider-fleet}/tofu-1.12.6/tofu"
  if [ -x "$tofu" ]; then cli="$tofu"; else cli=$(command -v terraform || true); fi
fi
[ -n "$cli" ] && [ -x "$cli" ] || { echo "demo: neither OpenTofu nor Terraform found: run scripts/setup.sh" >&2; exit 1; }
command -v /usr/sbin/sshd >/dev/null || [ -x /usr/sbin/sshd ] || { echo "demo: sshd not found: run scripts/setup.sh (Debian package openssh-server)" >&2; exit 1; }

work=$(mktemp -d)
sandbox_pid=""
cleanup() {
  [ -n "$sandbox_pid" ] && kill "$sandbox_pid" 2>/dev/null && wait "$sandbox_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "==> building the provider"
go build -o "$work/bin/terraform-provider-fleet" .
go build -o "$work/bin/fleet-sandbox" ./cmd/fleet-sandbox

echo "==> starting the sandbox (hosts: healthy, rekeyed, blackholed, down, jumped; storage nodes: sf-healthy, sf-readonly, sf-hung, sf-down; deploy targets: web1, web2, and a flake of their NixOS configurations, not built yet)"
mkdir -p "$work/tf"
cp examples/demo/main.tf "$work/tf/"
# The sandbox runs until its stdin closes; a FIFO kept open by this shell
# holds it up, and the trap ends it.
mkfifo "$work/hold"
nixos="$work/nixos"
"$work/bin/fleet-sandbox" -out "$work/tf/sandbox.auto.tfvars.json" -nixos-dir "$nixos" < "$work/hold" > "$work/sandbox.out" &
sandbox_pid=$!
exec 3>"$work/hold"
for _ in $(seq 1 100); do
  grep -qx ready "$work/sandbox.out" 2>/dev/null && break
  kill -0 "$sandbox_pid" 2>/dev/null || { echo "demo: the sandbox failed to start" >&2; exit 1; }
  sleep 0.1
done
grep -qx ready "$work/sandbox.out" || { echo "demo: the sandbox did not become ready" >&2; exit 1; }

cat > "$work/cli.tfrc" <<RC
provider_installation {
  dev_overrides {
    "registry.terraform.io/fleetops/fleet" = "$work/bin"
    "registry.opentofu.org/fleetops/fleet" = "$work/bin"
  }
  direct {}
}
RC
export TF_CLI_CONFIG_FILE="$work/cli.tfrc" CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1 TF_INPUT=0
# Nix never contacts a binary cache: the sandbox's closures are local.
export NIX_CONFIG=$'substituters =\nrequire-sigs = false\nbuild-users-group =\nsandbox = false\n'

cd "$work/tf"
echo "==> $(basename "$cli") apply (the black-holed host costs one 10 s probe timeout; web1's and web2's systems are built from their configurations first)"
# The deployment's web2 fails its verdict on purpose, so this apply fails at
# the end (after everything else was applied and recorded).
"$cli" apply -auto-approve -compact-warnings || echo "==> the apply failed, as the demo means it to: web2's new system failed a unit and was rolled back"
echo
echo "==> editing two configurations in $nixos: web1 upgrades nginx to 1.26.3 (systems/web1.json),"
echo "    and web2's activation no longer fails nginx.service (kind=succeed in systems/web2.json)"
sed -i 's/nginx-1\.26\.2/nginx-1.26.3/g' "$nixos/systems/web1.json"
sed -i 's/kind=failed-units/kind=succeed/' "$nixos/systems/web2.json"
echo
echo "==> $(basename "$cli") plan: the refreshed records, a warning for every host that needs a look, and what each switch will build"
"$cli" plan
echo
echo "==> $(basename "$cli") apply: web1 and web2 are built and switched"
"$cli" apply -auto-approve -compact-warnings
echo
echo "==> done; the sandbox is stopped and $work removed"
cd "$root"
