#!/bin/sh
# The fleet's drift job: run it from cron or a CI schedule, in the
# directory of the configuration, with the state backend's credentials.
# (With OpenTofu, write tofu for terraform.)
#
#   exit 0  the fleet is as state says: nothing to do
#   exit 2  something an operator must look at changed; the plan says what
#   exit 1  the job itself failed (backend, credentials, configuration)
#
# It reads the saved plan's resource_drift rather than the exit code of
# plan -detailed-exitcode, which Terraform before 1.15 sets to 2 for every
# refresh-only plan of resources that hold numbers, changed or not.
set -u
plan=$(mktemp) || exit 1
trap 'rm -f "$plan"' EXIT
terraform init -input=false -no-color >/dev/null || exit 1
terraform plan -refresh-only -input=false -no-color -lock-timeout=10m -out="$plan" || exit 1
drift=$(terraform show -json "$plan") || exit 1
case $drift in
*'"resource_drift":['*) exit 2 ;;
esac
exit 0
