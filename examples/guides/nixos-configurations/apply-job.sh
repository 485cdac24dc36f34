#!/bin/sh
# The CI apply job, on a runner whose Nix store may lack what the plan
# job's evaluation wrote there: bring in the plan job's derivations (its
# artifacts tfplan, derivations and drvs/, in the directory of the
# configuration), then apply the saved plan. The apply builds the systems
# from them. --no-check-sigs: what the plan job wrote is unsigned; trust
# drvs/ as you trust tfplan. (With OpenTofu, write tofu for terraform.)
set -eu
terraform init -input=false -no-color >/dev/null
if [ -s derivations ]; then
  # shellcheck disable=SC2046 # one store path per line, no spaces
  nix --extra-experimental-features nix-command copy --derivation --from "file://$PWD/drvs" --no-check-sigs $(cat derivations)
fi
terraform apply -input=false tfplan
