package nixtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
)

// Kind is what a system closure's switch-to-configuration does.
type Kind int

const (
	// Succeed activates (`test`: /run/current-system points at the
	// closure, no unit failed, SSH restored if cut) and installs the boot
	// entry (`boot`), exiting 0.
	Succeed Kind = iota
	// FailUnits activates, marks Behaviour.FailedUnits failed (systemctl
	// reports the system degraded and lists them) and exits 4; `boot`
	// succeeds.
	FailUnits
	// LockHeld exits 11 ("Could not acquire lock"), changing nothing, on
	// the first Behaviour.LockedCalls calls of an action (counted per
	// target, closure and action; Behaviour.LockedAction limits it to one
	// action); later calls succeed.
	LockHeld
	// Hang logs the start of activation and then sleeps for an hour in
	// `test` (and `switch`), changing nothing; `boot` succeeds.
	Hang
	// RebootRequired activates and exits 100: the configuration is live but
	// needs a reboot to be complete. `boot` succeeds.
	RebootRequired
	// CutSSH activates and exits 0, and from then on the target's gate
	// handles new TCP connections as Behaviour.Cut says, as a configuration
	// whose firewall shuts port 22 would; connections already open carry
	// on. A later succeeding activation (a rollback, say) restores access.
	CutSSH
	// BootloaderFails activates in `test` and exits 0, but `boot` (and
	// `switch`) exits 1 with "Failed to install bootloader" and leaves the
	// boot entry alone, as in a container with no bootloader to install.
	BootloaderFails
	// BootHangs activates in `test` and exits 0, but `boot` (and `switch`)
	// logs the start of the boot entry's update and then sleeps for an
	// hour, leaving the boot entry alone, as a bootloader install stuck on
	// a hung /boot would.
	BootHangs
)

func (k Kind) String() string {
	switch k {
	case Succeed:
		return "Succeed"
	case FailUnits:
		return "FailUnits"
	case LockHeld:
		return "LockHeld"
	case Hang:
		return "Hang"
	case RebootRequired:
		return "RebootRequired"
	case CutSSH:
		return "CutSSH"
	case BootloaderFails:
		return "BootloaderFails"
	case BootHangs:
		return "BootHangs"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// slug is the Kind in the closure's store path name.
func (k Kind) slug() string {
	switch k {
	case Succeed:
		return "succeed"
	case FailUnits:
		return "failed-units"
	case LockHeld:
		return "lock-held"
	case Hang:
		return "hang"
	case RebootRequired:
		return "reboot-required"
	case CutSSH:
		return "cut-ssh"
	case BootloaderFails:
		return "bootloader-fails"
	case BootHangs:
		return "boot-hangs"
	}
	return ""
}

// Cut is how a target's gate treats new connections once SSH is cut.
type Cut string

const (
	// CutReset resets new connections at once, as a firewall that rejects:
	// ssh fails fast ("Connection reset by peer", exit 255).
	CutReset Cut = "reset"
	// CutBlackHole accepts new connections and never answers, as a firewall
	// that drops: ssh waits for its ConnectTimeout.
	CutBlackHole Cut = "blackhole"
)

// Behaviour is how a system closure made by Closure behaves when it is
// switched to.
type Behaviour struct {
	Kind Kind
	// FailedUnits, for FailUnits: the units reported failed, e.g.
	// "nginx.service".
	FailedUnits []string
	// LockedCalls, for LockHeld: how many calls exit 11 before calls
	// succeed.
	LockedCalls int
	// LockedAction, for LockHeld: "test", "boot" or "switch" to hold the
	// lock for that action only; empty holds it for each action.
	LockedAction string
	// Cut, for CutSSH: how new connections fail; empty means CutReset.
	Cut Cut
	// Delay makes an activation take this long (after it logs "activating
	// the configuration...", before it switches), so a test can act while
	// one is running.
	Delay time.Duration
	// BootDelay makes the boot entry's update take this long (after it
	// logs "updating the boot entry...", before it writes the entry).
	BootDelay time.Duration
	// Hold makes an activation wait, after its Delay and before it
	// switches, until the test calls Target.Release: an order between
	// hosts that a busy machine's timing cannot break.
	Hold bool
}

var unitPattern = regexp.MustCompile(`^[A-Za-z0-9@._:-]+$`)

// check reports a Behaviour that cannot be turned into a script.
func (b Behaviour) check() error {
	if b.Kind.slug() == "" {
		return fmt.Errorf("unknown kind %v", b.Kind)
	}
	if (b.Kind == FailUnits) != (len(b.FailedUnits) > 0) {
		return fmt.Errorf("%v with FailedUnits %q: FailedUnits is for FailUnits, which needs at least one", b.Kind, b.FailedUnits)
	}
	for _, u := range b.FailedUnits {
		if !unitPattern.MatchString(u) {
			return fmt.Errorf("failed unit %q: want a unit name such as nginx.service", u)
		}
	}
	if (b.Kind == LockHeld) != (b.LockedCalls > 0) {
		return fmt.Errorf("%v with LockedCalls %d: LockedCalls is for LockHeld, which needs at least 1", b.Kind, b.LockedCalls)
	}
	switch b.LockedAction {
	case "", "test", "boot", "switch":
	default:
		return fmt.Errorf("LockedAction %q: want test, boot, switch or empty", b.LockedAction)
	}
	if b.LockedAction != "" && b.Kind != LockHeld {
		return fmt.Errorf("%v with LockedAction %q: LockedAction is for LockHeld", b.Kind, b.LockedAction)
	}
	switch b.Cut {
	case "", CutReset, CutBlackHole:
	default:
		return fmt.Errorf("Cut %q: want CutReset or CutBlackHole", b.Cut)
	}
	if b.Cut != "" && b.Kind != CutSSH {
		return fmt.Errorf("%v with Cut %q: Cut is for CutSSH", b.Kind, b.Cut)
	}
	if b.Delay < 0 || b.BootDelay < 0 {
		return fmt.Errorf("negative delay %s or boot delay %s: want zero or more", b.Delay, b.BootDelay)
	}
	return nil
}

// script is bin/switch-to-configuration for b, a POSIX sh script. Its
// store path is found at run time (readlink -f "$0"), since a store path
// cannot name itself in its own contents.
func (b Behaviour) script() string {
	cut := b.Cut
	if cut == "" {
		cut = CutReset
	}
	return fmt.Sprintf(`#!/bin/sh
# A nixtest system closure (%s): it switches a nixtest target the way a
# test asked, and records every call.
kind=%s
units='%s'
lock_calls=%d
lock_action='%s'
cut=%s
delay=%.3f
boot_delay=%.3f
hold=%t
state=%s
`, b.Kind, b.Kind.slug(), strings.Join(b.FailedUnits, " "), b.LockedCalls, b.LockedAction, cut, b.Delay.Seconds(), b.BootDelay.Seconds(), b.Hold, stateLink) + switchBody
}

const switchBody = `if [ ! -d "$state/" ]; then
	echo "switch-to-configuration: not on a nixtest target ($state is missing)" >&2
	exit 1
fi
self=$(readlink -f "$0")
self=${self%/bin/switch-to-configuration}
action=${1:-}
if [ "$action" = nixtest-boot ]; then
	# A boot into this system (the target's reboot stand-in): what its
	# activation leaves on the host, as no call.
	if [ "$kind" = failed-units ]; then printf '%s\n' $units > "$state/failed-units"; else : > "$state/failed-units"; fi
	if [ "$kind" = cut-ssh ]; then printf '%s\n' "$cut" > "$state/ssh-cut"; else rm -f "$state/ssh-cut"; fi
	exit 0
fi
case "$action" in
switch|boot|test|dry-activate) ;;
*)
	echo "Usage: $0 [switch|boot|test|dry-activate]" >&2
	exit 1
	;;
esac
printf '%s %s\n' "$action" "$self" >> "$state/switch.log"
# The event log (Target.Events): what each call changed, when, and for
# which transient unit ($NIXTEST_UNIT, set by the unit runner; empty for a
# call straight from a session). One line per event, appended whole.
event() {
	printf '%s %s %s\n' "$(date +%s.%N)" "$$" "$*" >> "$state/events.log"
}
# nap SECONDS sleeps, and ends at once at a signal (the traps below end
# the call, and say so in the event log), as a real activation ends when
# its unit is stopped: a shell runs a trap only once its foreground
# command has ended, so the sleep runs in the background.
napping=
nap() {
	sleep "$1" &
	napping=$!
	wait "$napping"
	napping=
}
# The journal keeps what the last activation logged.
: > "$state/activation.log"
log() {
	printf '%s\n' "$*" >&2
	printf '%s\n' "$*" >> "$state/activation.log"
}

# locked ACTION: true for the first lock_calls calls of ACTION.
locked() {
	[ "$lock_calls" -gt 0 ] || return 1
	[ -z "$lock_action" ] || [ "$lock_action" = "$1" ] || return 1
	f="$state/counters/${self##*/}-$1"
	n=$(cat "$f" 2>/dev/null || echo 0)
	[ "$n" -lt "$lock_calls" ] || return 1
	echo $((n + 1)) > "$f"
}

# replace_link TARGET LINK, atomically, as NixOS does.
replace_link() {
	ln -sfn "$1" "$2.nixtest.$$" && mv -T "$2.nixtest.$$" "$2" && event set-current "$1"
}

install_bootloader() {
	log "updating the boot entry..."
	if [ "$kind" = bootloader-fails ]; then
		log "Failed to install bootloader"
		exit 1
	fi
	if [ "$kind" = boot-hangs ]; then
		nap 3600
		exit 0
	fi
	if [ "$boot_delay" != 0.000 ]; then
		nap "$boot_delay"
		log "writing the boot entry..."
	fi
	printf '%s\n' "$self" > "$state/boot-entry.nixtest.$$"
	mv "$state/boot-entry.nixtest.$$" "$state/boot-entry" && event set-boot "$self"
}

activate() {
	log "activating the configuration..."
	# What a unit the switch starts would read: each key file in place
	# as the activation begins (its path and content's digest).
	for f in /run/keys/*; do
		[ -f "$f" ] && printf '%s %s %s\n' "$action" "$f" "$(sha256sum < "$f" | cut -c1-64)" >> "$state/keys-seen.log"
	done
	[ "$delay" = 0.000 ] || nap "$delay"
	if [ "$hold" = true ]; then
		while [ ! -e "$state/released" ]; do nap 0.1; done
	fi
	log "setting up /etc..."
	if [ "$kind" = hang ]; then
		log "reloading user units..."
		nap 3600
		exit 0
	fi
	replace_link "$self" /run/current-system
	if [ "$kind" = failed-units ]; then
		printf '%s\n' $units > "$state/failed-units"
	else
		: > "$state/failed-units"
	fi
	if [ "$kind" = cut-ssh ]; then
		log "firewall: new connections to port 22 are now dropped ($cut)"
		printf '%s\n' "$cut" > "$state/ssh-cut"
	elif [ ! -e "$state/hold-cut" ]; then
		rm -f "$state/ssh-cut"
	fi
	case "$kind" in
	failed-units)
		log "warning: the following units failed: $units"
		return 4
		;;
	reboot-required)
		log "a reboot is required to finish switching to this configuration"
		return 100
		;;
	esac
	log "the configuration is active"
	return 0
}

if locked "$action"; then
	log "Could not acquire lock"
	exit 11
fi
case "$action" in test|boot|switch)
	# Whose lease the host's deploy lock is under (the agreement's lease
	# file), as the call starts.
	lease=; read -r lease _ < ` + agreement.LeaseFile + ` 2>/dev/null
	# The file under the agreement's state directory its output goes to
	# (the boot entry's script sends it to its run's), as "<run>/<file>".
	output=$(readlink /proc/$$/fd/1 2>/dev/null)
	case $output in ` + agreement.StateDir + `/*/*) output=${output#` + agreement.StateDir + `/} ;; *) output= ;; esac
	event start "$action" "$self" "$(readlink -f /run/current-system)" "${NIXTEST_UNIT:--}" "${lease:--}" "${output:--}"
	# The end is said whatever ends it: signals are ignored while it is
	# (ignored, not caught: date, in the event's timestamp, inherits it,
	# and a stopped unit's second TERM to its process group cannot cut the
	# line short).
	trap 'rc=$?; trap "" HUP INT TERM PIPE; [ -z "$napping" ] || kill "$napping" 2>/dev/null; event end "$rc"' EXIT
	# Ended by a signal (its session dropped, say): said too. The first
	# signal's trap ignores the rest (a stopped unit's TERM to its process
	# group, the watchdog's own TERM: a second one in the EXIT trap would
	# end it before it said its end).
	trap 'trap "" HUP INT TERM PIPE; exit 129' HUP
	trap 'trap "" HUP INT TERM PIPE; exit 130' INT
	trap 'trap "" HUP INT TERM PIPE; exit 141' PIPE
	trap 'trap "" HUP INT TERM PIPE; exit 143' TERM
	;;
esac
case "$action" in
test)
	activate
	exit
	;;
boot)
	install_bootloader
	exit 0
	;;
switch)
	# NixOS installs the bootloader first, then activates.
	install_bootloader
	activate
	exit
	;;
dry-activate)
	# As NixOS's does, in small: the units whose files differ from the
	# running system's.
	cur=$(readlink -f /run/current-system)
	stop= restart= start=
	for f in "$cur"/etc/systemd/system/*; do
		[ -f "$f" ] || continue
		u=${f##*/}
		if [ ! -e "$self/etc/systemd/system/$u" ]; then
			stop="$stop${stop:+, }$u"
		elif [ "$(readlink -f "$f")" != "$(readlink -f "$self/etc/systemd/system/$u")" ]; then
			restart="$restart${restart:+, }$u"
		fi
	done
	for f in "$self"/etc/systemd/system/*; do
		[ -f "$f" ] && [ ! -e "$cur/etc/systemd/system/${f##*/}" ] && start="$start${start:+, }${f##*/}"
	done
	[ -z "$stop" ] || log "would stop the following units: $stop"
	log "would activate the configuration..."
	[ -z "$restart" ] || log "would restart the following units: $restart"
	[ -z "$start" ] || log "would start the following units: $start"
	exit 0
	;;
esac
`

// Closure adds a new system closure to the deployer's Nix store (the
// host's /nix, outside every target) and returns its store path: a
// directory whose bin/switch-to-configuration behaves as b says on any
// nixtest target. Each call makes a distinct store path, named
// nixos-system-nixtest-<kind>-<random>. The path stays in the host's store
// (no test holds a GC root for it, so a garbage collection removes it).
func Closure(tb TB, b Behaviour) string {
	tb.Helper()
	if err := b.check(); err != nil {
		tb.Fatalf("nixtest: Closure: %v", err)
	}
	requireNix(tb)
	nonce := make([]byte, 5)
	if _, err := rand.Read(nonce); err != nil {
		tb.Fatalf("nixtest: random name: %v", err)
	}
	name := "nixos-system-nixtest-" + b.Kind.slug() + "-" + hex.EncodeToString(nonce)
	dir := filepath.Join(tb.TempDir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	files := map[string]string{
		"bin/switch-to-configuration": b.script(),
		"nixos-version":               name + "\n",
	}
	for rel, text := range files {
		mode := os.FileMode(0o644)
		if strings.HasPrefix(rel, "bin/") {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(text), mode); err != nil {
			tb.Fatalf("nixtest: %v", err)
		}
	}
	// sw/bin, as a NixOS system has: the system's tools, which a login
	// shell without them on PATH reaches through /run/current-system.
	if err := os.MkdirAll(filepath.Join(dir, "sw", "bin"), 0o755); err != nil {
		tb.Fatalf("nixtest: %v", err)
	}
	for _, tool := range systemTools {
		target := stateLink + "/bin/" + tool
		if !slices.Contains(standIns, tool) {
			target = "/usr/bin/" + tool
		}
		if err := os.Symlink(target, filepath.Join(dir, "sw", "bin", tool)); err != nil {
			tb.Fatalf("nixtest: %v", err)
		}
	}
	return AddToStore(tb, dir)
}

// AddToStore adds the directory dir to the deployer's Nix store (the
// host's /nix) with nix-store --add and returns its store path, named as
// dir's last element.
func AddToStore(tb TB, dir string) string {
	tb.Helper()
	requireNix(tb)
	name := filepath.Base(dir)
	cmd := exec.Command("nix-store", "--add", dir)
	cmd.Env = DeployerEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("nixtest: nix-store --add %s: %v\n%s", dir, err, stderr.String())
	}
	path := strings.TrimSpace(string(out))
	if !strings.HasPrefix(path, "/nix/store/") || !strings.HasSuffix(path, "-"+name) {
		tb.Fatalf("nixtest: nix-store --add %s printed %q, want a store path named %s\n%s", dir, out, name, stderr.String())
	}
	return path
}
