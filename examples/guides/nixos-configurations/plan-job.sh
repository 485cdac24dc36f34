#!/bin/sh
# The CI plan job, in the directory of the configuration: plan, and keep
# with the saved plan the derivations of every node, so that an apply job
# on another runner (apply-job.sh) has them. Extra arguments go to plan
# (-var build_at_plan=true). (With OpenTofu, write tofu for terraform.)
#
# Keep tfplan, derivations and drvs/ as the job's artifacts.
set -eu
terraform init -input=false -no-color >/dev/null
terraform plan -input=false -out=tfplan "$@"
terraform show -json tfplan |
  jq -r '.resource_changes[] | select(.type == "fleet_ssh_deployment")
         | (.change.after.nodes // [])[] | .derivation // empty' > derivations
if [ -s derivations ]; then
  # shellcheck disable=SC2046 # one store path per line, no spaces
  nix --extra-experimental-features nix-command copy --derivation --to "file://$PWD/drvs" $(cat derivations)
fi
