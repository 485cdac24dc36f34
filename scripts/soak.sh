#!/usr/bin/env bash
# make soak: the long runs make test leaves out.
# 1. The host agreement's long exploration. make test explores 50
#    schedules (and the regression cases); this draws SOAK_SCHEDULES (606:
#    the even seeds sweep the 303 cells of the coverage table, one each, a
#    cell whose schedule did not reach it planned again) from
#    seed SOAK_FIRST, SOAK_PARALLEL at once (a schedule a planned fault of
#    which never fired is drawn again from the next seed), and prints the
#    counts: schedules run, those drawn again, and the seeds that broke an
#    invariant, by invariant. A
#    failing schedule prints its seed and the command that replays it
#    alone. The full output is kept in bench/out/soak.txt.
# 2. The plans of fleet changes at fleet size: make test runs 12 hosts
#    through both CLIs and 24 through one; this runs 12 and 48 through both
#    (FLEET_ACC_SOAK=1). Output in bench/out/soak-fleet.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

out=bench/out/soak.txt
mkdir -p "$(dirname "$out")"
export FLEET_EXPLORE_SCHEDULES="${SOAK_SCHEDULES:-606}"
export FLEET_EXPLORE_FIRST="${SOAK_FIRST:-1}"
export FLEET_EXPLORE_PARALLEL="${SOAK_PARALLEL:-4}"
# Every kind of fault at every step it may be planned at, and each host
# behaviour, exercised by one schedule at least, or the soak fails.
export FLEET_EXPLORE_EVERY_CELL=1
echo "soak: $FLEET_EXPLORE_SCHEDULES schedules from seed $FLEET_EXPLORE_FIRST, $FLEET_EXPLORE_PARALLEL at once (output in $out)" >&2
rc=0
go test -race -count=1 -timeout 0 -parallel "$FLEET_EXPLORE_PARALLEL" -run '^TestHostAgreementExplored$' -v ./internal/deploy/ >"$out" 2>&1 || rc=$?
grep -E 'explored [0-9]+ schedules|fresh schedules (drawn again|never had)|what the schedules exercised|never exercised|^ +explore_test\.go:[0-9]+: +"|broke the agreement:$|^ +replay: ' "$out" | sed -E 's/^ +explore_test\.go:[0-9]+: //' || true
grep -E '^(ok|FAIL|panic)' "$out" | tail -3 || true

fleet=bench/out/soak-fleet.txt
echo "soak: the fleet-size plan tests at 12 and 48 hosts through both CLIs (output in $fleet)" >&2
FLEET_ACC_SOAK=1 go test -race -count=1 -timeout 60m -run '^(TestFleetChangesPlanShort|TestDeploymentPlanIsShortAtFleetSize)$' -v ./internal/provider/ >"$fleet" 2>&1 || rc=$?
grep -E '^ +--- (PASS|FAIL)|lines of each plan|a one-node change plans' "$fleet" || true
grep -E '^(ok|FAIL|panic)' "$fleet" | tail -3 || true
exit "$rc"
