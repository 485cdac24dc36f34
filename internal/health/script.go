package health

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// MarkerDir is where a node keeps its probe markers: a private directory per
// user, never on a checked path (a marker on the path that hangs would hang
// too). The pid of a probe still running is kept there, so that no second
// probe of the same check starts on that node while it hangs, even from
// another run or another provider process; the last good heartbeat of
// each path; and the name of a heartbeat's file not yet removed.
//
// Its name is predictable and its parent writable by everyone, so another
// user of the node may have made it first, as a directory of theirs or a
// link to anywhere the login (root, say) can write. markerDirCheck refuses
// such a directory before anything is written in or through it.
const MarkerDir = `${TMPDIR:-/tmp}/fleet-node-health.$(id -u)`

// markerDirCheck fails the script, naming the directory and the fix, if
// the marker directory's parent lets others rename it away (writable by
// others without the sticky bit); then makes the directory (0700, under
// umask 077) if it is not there, and fails if it is a symbolic link, is
// not owned by the login, or is writable by anyone else. stat does not
// follow links (%F says "symbolic link"); %A is the mode as ls shows it,
// matched by position. It has a format verb for the script's tag.
const markerDirCheck = `fleet_fatal() { echo "%[1]s fatal $*"; exit 0; }
fleet_pa=$(stat -L -c '%%A' -- "${M%%/*}/.") || fleet_pa=
case "$fleet_pa" in ????????w[!tT]) fleet_fatal "the directory holding the marker directory $M is writable by others without the sticky bit (mode $fleet_pa), so another user can replace it: set TMPDIR to a directory only this login can write" ;; esac
[ -L "$M" ] || [ -d "$M" ] || mkdir -p -- "$M" 2>/dev/null || [ -d "$M" ] || fleet_fatal "cannot create the marker directory $M"
fleet_u=$(id -u)
fleet_st=$(stat -c '%%u %%A %%F' -- "$M") || fleet_fatal "cannot read the marker directory $M"
fleet_o=${fleet_st%%%% *} fleet_st=${fleet_st#* }
fleet_a=${fleet_st%%%% *} fleet_f=${fleet_st#* }
fleet_fix="remove it (rm -rf -- '$M', as root if need be) and evaluate again: the provider makes it anew, mode 0700"
[ "$fleet_f" = directory ] || fleet_fatal "the marker directory $M is a $fleet_f, not a directory this login made (another user may have planted it to redirect writes): $fleet_fix"
[ "$fleet_o" = "$fleet_u" ] || fleet_fatal "the marker directory $M is owned by uid $fleet_o, not by this login (uid $fleet_u): another user made it; $fleet_fix"
case "$fleet_a" in ?????w????|????????w?) fleet_fatal "the marker directory $M is writable by other users (mode $fleet_a): another user can plant links in it; $fleet_fix" ;; esac
`

// markerKey names a check of a node on the node.
func markerKey(node, id string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + id))
	return hex.EncodeToString(sum[:12])
}

// script is the one shell script that runs a node's script checks: each in
// the background, all under one deadline. The report is one header line per
// check, "<tag> <i> done <exit> <ms>", "<tag> <i> outstanding <since>" or
// "<tag> <i> timeout", followed by the check's output.
type script struct {
	text string
	tag  string
	n    int
}

// roHelper tells whether the mount holding a directory is read-only, from
// /proc/self/mountinfo (the mount point that is the longest prefix of the
// directory's physical path): it prints "mount" when the mount's own flag
// is ro, "super" when only its superblock's is (the super options, after
// the " - " separator: a file system the kernel forced read-only after
// errors, seen through a bind mount whose own flag still says rw), and
// fails when neither is.
const roHelper = `fleet_ro() {
  fleet_r=$(cd -- "$1" 2>/dev/null && pwd -P) || return 1
  awk -v p="$fleet_r" 'BEGIN { best = -1 }
    { m = $5; gsub(/\\040/, " ", m)
      if (m == "/" || p == m || substr(p, 1, length(m) + 1) == m "/") {
        if (length(m) > best) { best = length(m); o = $6; so = ""; for (i = 7; i < NF; i++) if ($i == "-") { so = $(i + 3); break } } } }
    END { n = split(o, a, ","); for (i = 1; i <= n; i++) if (a[i] == "ro") { print "mount"; exit 0 }
      n = split(so, a, ","); for (i = 1; i <= n; i++) if (a[i] == "ro") { print "super"; exit 0 }
      exit 1 }' /proc/self/mountinfo
}
`

func newScript(node string, checks []ScriptCheck, timeout, interval time.Duration) script {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	s := script{tag: "@@fleet-" + hex.EncodeToString(nonce[:]), n: len(checks)}
	var b strings.Builder
	fmt.Fprintf(&b, "umask 077\nM=\"%s\"\n", MarkerDir)
	fmt.Fprintf(&b, markerDirCheck, s.tag)
	fmt.Fprintf(&b, "W=$(mktemp -d) || { echo \"%s fatal mktemp -d failed\"; exit 0; }\n", s.tag)
	b.WriteString("fleet_ms() { date +%s%3N; }\n")
	b.WriteString(roHelper)
	keys := make([]string, len(checks))
	for i, c := range checks {
		keys[i] = markerKey(node, ID(c))
		fmt.Fprintf(&b, "fleet_c%d() {\n%s\n}\n", i, c.Script(ScriptEnv{Key: keys[i], WriteProbeInterval: interval}))
	}
	// A probe of the same check of the same node already running is never
	// joined by another. Its marker is a directory made atomically (mkdir)
	// holding its pid, its start and the pid of the script that started
	// it. A probe whose script is gone (it gave up at its deadline, or was
	// interrupted), or older than the probe timeout, is hung: it is
	// reported at once, and no probe starts. One whose script still runs is
	// another evaluation's (a data source and a resource evaluating the
	// same node at once): this one waits for it, up to its own deadline. A
	// finished probe removes its marker, also long after its script ended.
	fmt.Fprintf(&b, "fleet_end=$(( $(fleet_ms) + %d ))\nfleet_hung=%d\n", timeout.Milliseconds(), int64(math.Ceil(timeout.Seconds())))
	b.WriteString(`fleet_run() {
  fleet_m="$M/$2.d"
  until mkdir "$fleet_m" 2>/dev/null; do
    fleet_p= fleet_s= fleet_o=
    [ -f "$fleet_m/pid" ] && read -r fleet_p fleet_s fleet_o < "$fleet_m/pid"
    if [ -n "$fleet_p" ] && ! kill -0 "$fleet_p" 2>/dev/null; then rm -rf "$fleet_m"; continue; fi
    if [ -z "$fleet_p" ] && [ $(( $(date +%s) - $(stat -c %Y -- "$fleet_m" 2>/dev/null || date +%s) )) -ge 2 ]; then rm -rf "$fleet_m"; continue; fi
    if [ -n "$fleet_s" ] && { [ $(( $(date +%s) - fleet_s )) -ge "$fleet_hung" ] || ! kill -0 "${fleet_o:-0}" 2>/dev/null; }; then
      echo "$fleet_s" > "$W/$1.since"; return
    fi
    if [ "$(fleet_ms)" -ge "$fleet_end" ]; then echo "${fleet_s:-$(date +%s)}" > "$W/$1.since"; return; fi
    sleep 0.05
  done
  read -r fleet_me fleet_rest < /proc/self/stat 2>/dev/null || fleet_me=$(sh -c 'echo $PPID')
  echo "$fleet_me $(date +%s) $$" > "$fleet_m/pid"
  fleet_b=$(fleet_ms); fleet_c$1 > "$W/$1.out" 2>&1; fleet_x=$?; fleet_e=$(fleet_ms)
  echo "$fleet_x $((fleet_e - fleet_b))" > "$W/$1.tmp" && mv "$W/$1.tmp" "$W/$1.rc"
  rm -rf "$fleet_m"
}
`)
	// The subshell matters: redirecting a function call makes the shell
	// keep the original stdout open on a saved descriptor until the
	// function returns, and a hung probe would then hold the script's
	// output open past the deadline (dash does this).
	for i := range checks {
		fmt.Fprintf(&b, "( fleet_run %d %s ) </dev/null >/dev/null 2>&1 &\n", i, keys[i])
	}
	idx := make([]string, len(checks))
	for i := range checks {
		idx[i] = strconv.Itoa(i)
	}
	// The script ends when its caller is gone: over SSH, a closed session
	// leaves it orphaned (its parent changes), and it must not keep its
	// probes' markers owned by a live script.
	fmt.Fprintf(&b, `read -r fleet_x fleet_x fleet_x fleet_pp fleet_x < /proc/$$/stat 2>/dev/null || fleet_pp=
while :; do
  if [ -n "$fleet_pp" ]; then read -r fleet_x fleet_x fleet_x fleet_p2 fleet_x < /proc/$$/stat; [ "$fleet_p2" = "$fleet_pp" ] || exit 0; fi
  fleet_all=1
  for i in %s; do [ -f "$W/$i.rc" ] || [ -f "$W/$i.since" ] || { fleet_all=0; break; }; done
  [ "$fleet_all" = 1 ] && break
  [ "$(fleet_ms)" -ge "$fleet_end" ] && break
  sleep 0.02
done
`, strings.Join(idx, " "))
	for i := range checks {
		fmt.Fprintf(&b, `if [ -f "$W/%[1]d.since" ]; then echo "%[2]s %[1]d outstanding $(cat "$W/%[1]d.since")"
elif [ -f "$W/%[1]d.rc" ]; then echo "%[2]s %[1]d done $(cat "$W/%[1]d.rc")"
else echo "%[2]s %[1]d timeout"; fi
cat "$W/%[1]d.out" 2>/dev/null
`, i, s.tag)
	}
	b.WriteString("rm -rf \"$W\"\n")
	s.text = b.String()
	return s
}

// raw is one check's part of the report.
type raw struct {
	status string // done, outstanding, timeout; "" when missing
	exit   int
	ms     int64
	since  time.Time
	output string
}

// parse splits the report into the checks' parts. A fatal line fails the
// whole script.
func (s script) parse(out string) ([]raw, error) {
	parts := make([]raw, s.n)
	cur := -1
	var bodies = make([]strings.Builder, s.n)
	for _, line := range strings.Split(out, "\n") {
		// A check's output without a final newline runs into the next
		// header: split it off.
		if j := strings.Index(line, s.tag+" "); j > 0 {
			if cur >= 0 {
				bodies[cur].WriteString(line[:j])
			}
			line = line[j:]
		}
		if !strings.HasPrefix(line, s.tag+" ") {
			if cur >= 0 {
				bodies[cur].WriteString(line)
				bodies[cur].WriteByte('\n')
			}
			continue
		}
		f := strings.Fields(strings.TrimPrefix(line, s.tag+" "))
		if len(f) > 0 && f[0] == "fatal" {
			return nil, fmt.Errorf("the node's shell could not run the checks: %s", strings.Join(f[1:], " "))
		}
		if len(f) < 2 {
			continue
		}
		i, err := strconv.Atoi(f[0])
		if err != nil || i < 0 || i >= s.n {
			continue
		}
		cur = i
		r := raw{status: f[1], exit: -1}
		switch r.status {
		case "done":
			// A header cut short or garbled is no verdict: a garbled exit
			// status must not read as 0.
			var xerr, merr error
			if len(f) >= 4 {
				r.exit, xerr = strconv.Atoi(f[2])
				r.ms, merr = strconv.ParseInt(f[3], 10, 64)
			}
			if len(f) < 4 || xerr != nil || merr != nil {
				r = raw{}
			}
		case "outstanding":
			if len(f) >= 3 {
				if n, err := strconv.ParseInt(f[2], 10, 64); err == nil {
					r.since = time.Unix(n, 0).UTC()
				}
			}
		}
		parts[i] = r
	}
	for i := range parts {
		parts[i].output = bodies[i].String()
	}
	return parts, nil
}
