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
