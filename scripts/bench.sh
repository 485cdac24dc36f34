#!/usr/bin/env bash
# make bench: a reachability pass over up to 1000 in-process SSH hosts (10 %
# black-holed) against its bound ceil(n / c) * t_probe and against OpenSSH
# doing the same job at the same parallelism, then a table of the ratios.
# The full output is kept in bench/out/reachability.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

out=bench/out/reachability.txt
mkdir -p "$(dirname "$out")"

# 2x keeps the 1000-host runs to two passes on each side; -run '^$' skips tests.
go test -run '^$' -bench BenchmarkReachabilityPass -benchtime 2x -timeout 60m ./internal/reachability/ 2>&1 | tee "$out"

# Metrics come as "value unit" pairs after the iteration count; pick them by unit.
table=$(awk '
    /^BenchmarkReachabilityPass\// && /pass_ms/ {
      split($1, part, "/"); n = part[2]; c = part[3]; sub(/-[0-9]+$/, "", c)
      delete m
      for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i
      rows[++k] = sprintf("%-8s %-6s %10.0f %10.0f %12.3f %12.3f %11.0f %17.3f", n, c,
        m["pass_ms"], m["bound_ms"], m["bound_ratio"], m["model_ratio"], m["openssh_ms"], m["ratio_vs_openssh"])
    }
    END {
      printf "%-8s %-6s %10s %10s %12s %12s %11s %17s\n", "hosts", "slots", "pass_ms", "bound_ms", "bound_ratio", "model_ratio", "openssh_ms", "ratio_vs_openssh"
      for (i = 1; i <= k; i++) print rows[i]
      if (k == 0) { print "bench: no benchmark results found" > "/dev/stderr"; exit 1 }
    }' "$out")
{
  echo
  echo "Reachability pass: ratios measured side by side (t_probe = OpenSSH ConnectTimeout = 1 s)"
  echo "$table"
  echo "bound_ratio = pass / (ceil(n/c) * t_probe); model_ratio = pass / (ceil(black-holed/c) * t_probe);"
  echo "ratio_vs_openssh = pass / OpenSSH pass. Lower is better for all three."
} | tee -a "$out"

# The static check at plan of an executor whose encrypted key this process
# has already decrypted for another one, against decrypting it again.
keys=bench/out/check.txt
go test -run '^$' -bench BenchmarkCheckEncryptedKey -benchtime 20x ./internal/sshdial/ 2>&1 | tee "$keys"
awk '
  /decrypt-each-time/ { each = $3 }
  /\/check/           { check = $3 }
  END {
    if (!each || !check) { print "bench: no check benchmark results" > "/dev/stderr"; exit 1 }
    printf "\nStatic check at plan, encrypted key already parsed: %.0f ns against %.0f ns decrypting it again (ratio %.5f)\n", check, each, check / each
  }' "$keys" | tee -a "$out"

# Node health: SSH connections and round trips per evaluation, probes against
# the distinct checks, an evaluation against its bound ceil(n / slots) *
# probe_timeout, and hung paths against one probe timeout, in one run. The
# full output is kept in bench/out/node-health.txt.
health=bench/out/node-health.txt
go test -run '^$' -bench BenchmarkNodeHealth -benchtime 2x -timeout 15m ./internal/health/ 2>&1 | tee "$health"
awk '
    /^BenchmarkNodeHealth/ && /_ms|_per_node/ {
      name = $1; sub(/-[0-9]+$/, "", name); split(name, part, "/")
      delete m
      for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i
      if (part[1] == "BenchmarkNodeHealthRoundTrips") {
        sub(/^nodes=/, "", part[2])
        rt[++nrt] = sprintf("%-6s %16.2f %13.2f %13.2f %20.3f %17.3f %15.2f", part[2],
          m["connections/eval"], m["sessions/eval"], m["channels/eval"], m["connections_per_node"], m["sessions_per_node"], m["probes_per_node"])
      } else if (part[1] == "BenchmarkNodeHealthDedup") {
        dd[++ndd] = sprintf("%-13.0f %17.0f %17.0f %15.2f %11.3f %17.3f",
          m["refs_per_node"], m["declared_per_node"], m["distinct_per_node"], m["probes_per_node"], m["probe_ratio"], m["sessions_per_node"])
      } else if (part[1] == "BenchmarkNodeHealthEval") {
        sub(/^nodes=/, "", part[3])
        ev[++nev] = sprintf("%-6s %6s %6.0f %10.0f %9.0f %10.0f %12.3f", part[2], part[3],
          m["slots"], m["eval_ms"], m["round_ms"], m["bound_ms"], m["bound_ratio"])
      } else if (part[1] == "BenchmarkNodeHealthHungPaths") {
        sub(/^paths=/, "", part[3])
        hp[++nhp] = sprintf("%-6s %6s %9.0f %10.0f %11.0f %7.3f %13.3f %11.3f %12.0f", part[2], part[3],
          m["first_ms"], m["repeat_ms"], m["timeout_ms"], m["ratio"], m["repeat_ratio"], m["wait_ratio"], m["fresh_names"])
      }
    }
    END {
      if (!nrt || !ndd || !nev || !nhp) { print "bench: node health benchmark results missing" > "/dev/stderr"; exit 1 }
      print ""
      print "Node health: SSH connections and round trips per evaluation (n nodes on one sshd, 3 path + 1 command checks each)"
      printf "%-6s %16s %13s %13s %20s %17s %15s\n", "nodes", "connections/eval", "sessions/eval", "channels/eval", "connections_per_node", "sessions_per_node", "probes_per_node"
      for (i = 1; i <= nrt; i++) print rt[i]
      print "connections_per_node and sessions_per_node: target 1 (one connection, one session = one round trip, per node)."
      print ""
      print "Node health: probes against distinct checks (10 nodes; object types list overlapping checks)"
      printf "%-13s %17s %17s %15s %11s %17s\n", "refs_per_node", "declared_per_node", "distinct_per_node", "probes_per_node", "probe_ratio", "sessions_per_node"
      for (i = 1; i <= ndd; i++) print dd[i]
      print "refs = check references through the node'"'"'s roles and types; declared = the checks keys among them;"
      print "distinct = their identities (kind + resolved target). probe_ratio = probes / distinct: target 1.0."
      print ""
      print "Node health: evaluation of n healthy nodes against its bound (probe_timeout = 2 s)"
      printf "%-6s %6s %6s %10s %9s %10s %12s\n", "where", "nodes", "slots", "eval_ms", "round_ms", "bound_ms", "bound_ratio"
      for (i = 1; i <= nev; i++) print ev[i]
      print "bound_ratio = eval / (ceil(n/slots) * probe_timeout): must be < 1. round_ms = eval / ceil(n/slots)."
      print ""
      print "Node health: one node with k hung paths (each a hung FUSE mount, write_probe_interval = 0) against one probe timeout"
      printf "%-6s %6s %9s %10s %11s %7s %13s %11s %12s\n", "where", "paths", "first_ms", "repeat_ms", "timeout_ms", "ratio", "repeat_ratio", "wait_ratio", "fresh_names"
      for (i = 1; i <= nhp; i++) print hp[i]
      print "Every iteration evaluates a node of a fresh name twice. ratio = first / probe_timeout: about 1 however many"
      print "paths hang (one timeout, not k); repeat_ratio = repeat / probe_timeout: about 0, every hung probe found"
      print "outstanding and none started; wait_ratio = (first - repeat) / probe_timeout: the time spent waiting, about 1."
    }' "$health" | tee -a "$health"

# Deployment: SSH connections the targets accepted per deployed node
# (target 2: the master and the verdict's new connection), and the engine's
# wall time against the same raw commands typed over one master connection
# (target at most 1.2), and against the raw commands plus the verdict's new
# login, for 1, 5 and 20 NixOS-like targets.
deploy_out=bench/out/deploy.txt
go test -run '^$' -bench BenchmarkDeploy -benchtime 1x -timeout 30m ./internal/deploy/ 2>&1 | tee "$deploy_out"
awk '
    /^BenchmarkDeploy\// {
      split($1, part, "/"); n = part[2]; sub(/-[0-9]+$/, "", n); sub(/^nodes=/, "", n)
      delete m
      for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i
      rows[++k] = sprintf("%-6s %15.2f %10.0f %8.0f %7.2f %13.0f %12.2f", n, m["conns_per_node"], m["engine_ms"], m["raw_ms"], m["ratio"], m["raw_login_ms"], m["ratio_login"])
    }
    END {
      if (k == 0) { print "bench: no deployment benchmark results" > "/dev/stderr"; exit 1 }
      print ""
      print "Deployment: connections per node and wall time against the raw commands over one master"
      printf "%-6s %15s %10s %8s %7s %13s %12s\n", "nodes", "conns_per_node", "engine_ms", "raw_ms", "ratio", "raw_login_ms", "ratio_login"
      for (i = 1; i <= k; i++) print rows[i]
      print "conns_per_node: target 2. ratio = engine / raw: target at most 1.2."
      print "raw_login: the raw commands plus the one new login after activation that the verdict needs; ratio_login = engine / raw_login."
    }' "$deploy_out" | tee -a "$deploy_out"

# State cost: plan (refresh included, converged) of n fleet_executor against
# n time_rotating (terraform-provider-time, a peer on the same framework)
# and n terraform_data, each less an empty configuration's plan, and the
# providers' peak RSS, in one run. The full output is kept in
# bench/out/state-cost.txt.
state_out=bench/out/state-cost.txt
FLEET_TOFU_PATH="${FLEET_TOFU_PATH:-$(scripts/build-tofu.sh)}" \
  go test -run '^$' -bench BenchmarkStateCost -benchtime 1x -timeout 40m ./internal/provider/ 2>&1 | tee "$state_out"
awk '
    /^BenchmarkStateCost\/deployment=/ {
      d = $1; sub(/-[0-9]+$/, "", d); sub(/^.*=/, "", d)
      delete m
      for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i
      dep = sprintf("Deployment of %s nodes (all held): apply %.0f ms, peak RSS %.1f MiB; plan %.0f ms, %.1f MiB; plan -refresh=false %.0f ms, %.1f MiB",
        d, m["apply_ms"], m["apply_rss_MiB"], m["plan_ms"], m["plan_rss_MiB"], m["norefresh_plan_ms"], m["norefresh_plan_rss_MiB"])
    }
    /^BenchmarkStateCost\/n=/ && /_plan_ms/ {
      split($1, part, "/"); n = part[2]; sub(/-[0-9]+$/, "", n); sub(/^n=/, "", n)
      delete m
      for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i
      rows[++k] = sprintf("%-6s %9.0f %11.0f %9.0f %9.0f %13.2f %13.2f %9.0f %9.0f %12.0f %12.1f %13.1f %10.1f", n,
        m["empty_plan_ms"], m["executor_net_ms"], m["time_net_ms"], m["data_net_ms"], m["ratio_vs_time"], m["ratio_vs_data"],
        m["executor_provider_cpu_ms"], m["time_provider_cpu_ms"], m["executor_apply_ms"],
        m["executor_plan_rss_MiB"], m["executor_apply_rss_MiB"], m["time_plan_rss_MiB"])
    }
    END {
      if (k == 0) { print "bench: no state cost benchmark results" > "/dev/stderr"; exit 1 }
      print ""
      print "State cost: plan of n resources less an empty plan (refresh included, no probe due), and the provider'"'"'s peak RSS"
      printf "%-6s %9s %11s %9s %9s %13s %13s %9s %9s %12s %12s %13s %10s\n", "n", "empty_ms", "executor_ms", "time_ms", "data_ms",
        "ratio_vs_time", "ratio_vs_data", "exec_cpu", "time_cpu", "exec_apply", "exec_rss_MiB", "apply_rss_MiB", "time_rss_MiB"
      for (i = 1; i <= k; i++) print rows[i]
      print "executor/time/data_ms = plan - empty plan of n fleet_executor / time_rotating / terraform_data; ratio_vs_* = executor_ms / that."
      print "exec_cpu, time_cpu: CPU ms of the provider processes during the plan. exec_apply: ms to create n executors, each probing its host."
      print "rss: peak resident set of a provider process (VmHWM), at plan; apply_rss at the apply that created the executors."
      if (dep != "") print dep
    }' "$state_out" | tee -a "$state_out"

# Fleet scale (issue 14): a converged deployment's plan against OpenSSH
# reading the same hosts at the same concurrency, the engine's reads alone,
# and rollouts with parallelism against one node at a time, side by side.
fleet_out=bench/out/fleet-scale.txt
{
  go test -run '^$' -bench BenchmarkDeploymentPlan -benchtime 2x -timeout 40m ./internal/provider/
  go test -run '^$' -bench BenchmarkReadCurrent -benchtime 5x -timeout 10m ./internal/deploy/
  go test -run '^$' -bench BenchmarkRollout -benchtime 1x -timeout 30m ./internal/deploy/
} 2>&1 | tee "$fleet_out"
awk '
    function metrics() { delete m; for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i }
    /^BenchmarkDeploymentPlan\// && /plan_ms/ {
      metrics(); n = $1; sub(/^.*nodes=/, "", n); sub(/-[0-9]+$/, "", n)
      plan[++p] = sprintf("%-6s %9.0f %15.0f %9.0f %11.0f %7.2f %16.2f", n, m["plan_ms"], m["plan_no_refresh_ms"], m["empty_plan_ms"], m["openssh_ms"], m["ratio"], m["logins_per_host"])
    }
    /^BenchmarkReadCurrent\// && /engine_ms/ {
      metrics(); reads = sprintf("Engine reads of 24 hosts, 10 at a time: %.0f ms against OpenSSH %.0f ms (ratio %.2f)", m["engine_ms"], m["openssh_ms"], m["ratio"])
    }
    /^BenchmarkRollout\// && /serial_ms/ {
      metrics(); name = $1; sub(/^BenchmarkRollout\//, "", name); sub(/-[0-9]+$/, "", name)
      roll[++r] = sprintf("%-26s %10.0f %12.0f %7.3f %15.2f %13.0f %15.1f", name, m["serial_ms"], m["parallel_ms"], m["ratio"], m["ratio_vs_ideal"], m["most_at_once"], m["conns_per_node"])
    }
    END {
      if (p == 0 || r == 0) { print "bench: no fleet scale benchmark results" > "/dev/stderr"; exit 1 }
      print ""
      print "Plan of a converged deployment (Terraform), against OpenSSH reading the same hosts 10 at a time"
      printf "%-6s %9s %15s %9s %11s %7s %16s\n", "hosts", "plan_ms", "no_refresh_ms", "empty_ms", "openssh_ms", "ratio", "logins_per_host"
      for (i = 1; i <= p; i++) print plan[i]
      print "ratio = (plan - empty plan) / OpenSSH; target at most 1.5. A plan without refresh still logs in to warn about unreachable nodes."
      print reads
      print ""
      print "Rollout of nodes whose activation takes 3 s, one at a time against parallelism p"
      printf "%-26s %10s %12s %7s %15s %13s %15s\n", "case", "serial_ms", "parallel_ms", "ratio", "ratio_vs_ideal", "most_at_once", "conns_per_node"
      for (i = 1; i <= r; i++) print roll[i]
      print "ratio_vs_ideal = (parallel / serial) / (ceil(n/p) / n); target at most 1.3."
    }' "$fleet_out" | tee -a "$fleet_out"

# What each switch will do (issue 16): the plan of a 20-node switch with the
# summary against the same plan without it, and the summary's own share
# against the same queries run by hand over one ssh per node.
preview_out=bench/out/plan-preview.txt
go test -run '^$' -bench BenchmarkPlanPreview -benchtime 3x -timeout 20m ./internal/provider/ 2>&1 | grep -v '^ ' | tee "$preview_out"
awk '
    /^BenchmarkPlanPreview/ && /preview_ms/ {
      delete m; for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i
      printf "\nPlan of a 20-node switch: %.0f ms with the summary, %.0f ms without; the summary %.0f ms against %.0f ms by hand (ratio %.2f)\n", m["plan_ms"], m["plan_no_summary_ms"], m["preview_ms"], m["by_hand_ms"], m["ratio"]
      found = 1
    }
    END { if (!found) { print "bench: no plan preview benchmark results" > "/dev/stderr"; exit 1 } }' "$preview_out" | tee -a "$preview_out"

# From NixOS configurations (issues 23 and 31): evaluating 50 configurations
# that share an expensive import, in 1, 2 and 4 workers, against one nix
# eval of all of them by hand, in time and in the largest process; a
# failure they all share; a flake evaluated again unchanged; and the builds
# of a rollout against one nix-store --realise of as many systems by hand.
nixos_out=bench/out/nixos-systems.txt
{
  go test -run '^$' -bench BenchmarkEvaluate -benchtime 3x -timeout 20m ./internal/nixos/
  go test -run '^$' -bench BenchmarkRolloutBuilds -benchtime 3x -timeout 20m ./internal/deploy/
} 2>&1 | tee "$nixos_out"
awk '
    function metrics() { delete m; for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i }
    /^BenchmarkEvaluate\// && /by_hand_ms/ {
      metrics()
      e = sprintf("Evaluating 50 configurations (a shared import of 0.5 s, 0.2 s and 50 MiB each), against one nix eval of all by hand (%.0f ms, largest process %.0f MiB):", m["by_hand_ms"], m["by_hand_peak_mib"])
      split("w1 w2 w4 w2_unbounded", ws, " ")
      for (j = 1; j <= 4; j++) { w = ws[j]
        e = e sprintf("\n  %-13s %6.0f ms, ratio %.2f; largest process %.2f of by hand", w, m[w "_ms"], m[w "_vs_by_hand"], m[w "_peak_vs_by_hand"]) }
      e = e sprintf("\n  (w<n>: n workers, worker memory bound 1 GiB; targets for w2: time at most 0.65, largest process at most 0.5)")
      e = e sprintf("\n  a failure all 50 share: %d evaluations beyond the first round (target at most 2); unchanged, kept: %.0f ms, %d evaluations (target 0)",
        m["shared_failure_evaluations_beyond_first"], m["cached_ms"], m["cached_evaluations"])
    }
    /^BenchmarkRolloutBuilds\// && /rollout_builds_ms/ {
      metrics(); bl = sprintf("Builds inside a rollout of 8 nodes: %.0f ms, against %.0f ms for one nix-store --realise by hand (ratio %.2f, target at most 1.1)", m["rollout_builds_ms"], m["by_hand_ms"], m["ratio"])
    }
    END {
      if (e == "" || bl == "") { print "bench: no NixOS configurations benchmark results" > "/dev/stderr"; exit 1 }
      print ""; print e; print bl
    }' "$nixos_out" | tee -a "$nixos_out"
