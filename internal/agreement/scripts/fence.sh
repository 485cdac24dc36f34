#!/bin/sh
# fleet_fence RUN ACTION (fenceScript), which a fenced action runs first.
{{logfn}}
fleet_fence() {
# Take the guard shared, on descriptor 8, for the rest of the script's
# life: no lease begins while the action runs.
mkdir -p {{.StateDir}}/"$1" && exec 8>>{{.GuardFile}} && flock -s 8 || { fleet_log {{.StateDir}}/"$1" refused "$2" guard; echo "{{.FencedMarker}}the guard could not be taken" >&2; exit {{.FencedExit}}; }
# A deployer holds the lock (a lease is kept)...
if flock -n -s {{.LockFile}} true 2>/dev/null; then fleet_log {{.StateDir}}/"$1" refused "$2" no-lease; echo "{{.FencedMarker}}no deployment holds the host's deploy lock: this deployer's lease on it had ended" >&2; exit {{.FencedExit}}; fi
# ... and the lease is RUN's.
fleet_t=; read -r fleet_t fleet_p < {{.LeaseFile}} 2>/dev/null
[ "$fleet_t" = "$1" ] || { fleet_log {{.StateDir}}/"$1" refused "$2" lease "$fleet_t"; echo "{{.FencedMarker}}another deployment's lease holds the host's deploy lock: this deployer's had ended" >&2; exit {{.FencedExit}}; }
# Claim ACTION's fate, made once: an action the deployer cancelled, or one
# that ran already, is refused.
ln -s started {{.StateDir}}/"$1/$2.fate" 2>/dev/null || { fleet_log {{.StateDir}}/"$1" refused "$2" fate "$(readlink {{.StateDir}}/"$1/$2.fate")"; echo "{{.FencedMarker}}the $2 of this run was cancelled by its deployer, or ran already" >&2; exit {{.FencedExit}}; }
fleet_run_dir={{.StateDir}}/$1
fleet_log "$fleet_run_dir" fenced "$2"
}
