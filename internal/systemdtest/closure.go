package systemdtest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Kind is how the unit a system closure installs behaves when its
// activation (re)starts it.
type Kind int

const (
	// Succeed: the unit starts and stays active (a sleeping service), and
	// switch-to-configuration exits 0.
	Succeed Kind = iota
	// FailUnit: the unit's start fails (ExecStart=/bin/false), systemd
	// marks it failed and the system turns degraded, and
	// switch-to-configuration exits 4, as NixOS's does when units fail.
	FailUnit
)

func (k Kind) String() string {
	switch k {
	case Succeed:
		return "Succeed"
	case FailUnit:
		return "FailUnit"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// slug is the Kind in the closure's store path name.
func (k Kind) slug() string {
	switch k {
	case Succeed:
		return "succeed"
	case FailUnit:
		return "fail-unit"
	}
	return ""
}

// service is the [Service] section of the unit for k. A failing start is
// a oneshot, so that systemctl restart itself reports the failure rather
// than racing a process that exits after the start.
func (k Kind) service() string {
	switch k {
	case Succeed:
		return "Type=exec\nExecStart=/bin/sleep infinity\n"
	case FailUnit:
		return "Type=oneshot\nRemainAfterExit=yes\nExecStart=/bin/false\n"
	}
	return ""
}

// DefaultUnit is the unit a closure installs when Behaviour.Unit is empty.
const DefaultUnit = "webapp.service"

// Behaviour is what a system closure made by Closure does when it is
// switched to.
type Behaviour struct {
	Kind Kind
	// Unit is the service the closure installs and restarts; empty means
	// DefaultUnit. Every closure installs its unit under this name, so a
	// switch replaces the previous system's unit of the same name.
	Unit string
	// Delay makes an activation take this long (after it records its
	// call, before it switches), so a test can act while one is running.
	Delay time.Duration
	// ReadsKey is a key file (/run/keys/...) the unit reads each time it
	// starts, as a service reads its password: it records the content's
	// digest in KeyReadPath, and fails to start when the file is missing.
	ReadsKey string
}

// KeyReadPath is where a unit that reads a key (Behaviour.ReadsKey)
// records, each start, the digest of what it read.
const KeyReadPath = StateDir + "/key-read"

var servicePattern = regexp.MustCompile(`^[A-Za-z0-9@._:-]+\.service$`)

var keyPathPattern = regexp.MustCompile(`^/run/keys/[A-Za-z0-9._-]+$`)

func (b Behaviour) unit() string {
	if b.Unit == "" {
		return DefaultUnit
	}
	return b.Unit
}

func (b Behaviour) check() error {
	if b.Kind.slug() == "" {
		return fmt.Errorf("unknown kind %v", b.Kind)
	}
	if b.ReadsKey != "" && !keyPathPattern.MatchString(b.ReadsKey) {
		return fmt.Errorf("ReadsKey %q: want a path under /run/keys such as /run/keys/token", b.ReadsKey)
	}
	if !servicePattern.MatchString(b.unit()) {
		return fmt.Errorf("unit %q: want a service name such as webapp.service", b.Unit)
	}
	if b.Delay < 0 {
		return fmt.Errorf("negative delay %s: want zero or more", b.Delay)
	}
	return nil
}

// StateDir is where the closures' switch-to-configuration records its
// calls on the host (Calls, Activations); it outlives a reboot, as a log
// would.
const StateDir = "/var/lib/systemdtest"

// BootEntryPath is the host's boot entry: the system that
// switch-to-configuration boot made the boot default.
const BootEntryPath = "/boot/fleet-boot-entry"

// script is bin/switch-to-configuration for b, a POSIX sh script that
// drives the host's real systemd. Its store path is found at run time
// (readlink -f "$0"), since a store path cannot name itself; the unit file
// it installs gets that path in place of @out@.
func (b Behaviour) script() string {
	return fmt.Sprintf(`#!/bin/sh
# A systemdtest system closure (%s): it activates its unit with the host's
# real systemd and records every call in %s.
unit=%s
delay=%.3f
state=%s
boot_entry=%s
`, b.Kind, StateDir, b.unit(), b.Delay.Seconds(), StateDir, BootEntryPath) + switchBody
}

// switchBody activates as NixOS's switch-to-configuration does, in small:
// one lock, /run/current-system, the system's unit installed as a runtime
// unit, daemon-reload, a restart, and exit 4 when the unit failed. Each
// call appends "<action> <system>" to switch.log and, when it ends, a tab
// separated line to activations: action, system, the unit it ran in, that
// unit's RuntimeMaxUSec, its exit status, the system state and the failed
// units.
const switchBody = `self=$(readlink -f "$0")
self=${self%/bin/switch-to-configuration}
action=${1:-}
case "$action" in
switch|boot|test|dry-activate) ;;
*)
	echo "Usage: $0 [switch|boot|test|dry-activate]" >&2
	exit 1
	;;
esac
mkdir -p "$state"
printf '%s %s\n' "$action" "$self" >> "$state/switch.log"

# The unit this call runs in (a systemd-run transient unit, say): the last
# element of its cgroup path, when that is a service.
in_unit=$(sed -n -e 's|^0::.*/||p' -e 's|^[0-9]*:name=systemd:.*/||p' /proc/self/cgroup | grep '\.service$' | head -n 1)
max=
[ -z "$in_unit" ] || max=$(systemctl show --property=RuntimeMaxUSec --value "$in_unit")

finish() {
	rc=$1
	sys_state= failed=
	case "$action" in
	test|switch)
		sys_state=$(systemctl is-system-running 2>/dev/null)
		failed=$(systemctl --failed --plain --no-legend 2>/dev/null | awk '{print $1}' | tr '\n' ' ')
		;;
	esac
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$action" "$self" "$in_unit" "$max" "$rc" "$sys_state" "$failed" >> "$state/activations"
	exit "$rc"
}

# replace_link TARGET LINK, atomically, as NixOS does.
replace_link() {
	ln -sfn "$1" "$2.systemdtest.$$" && mv -T "$2.systemdtest.$$" "$2"
}

install_bootloader() {
	echo "updating the boot entry..." >&2
	mkdir -p "${boot_entry%/*}" &&
		printf '%s\n' "$self" > "$boot_entry.systemdtest.$$" &&
		mv "$boot_entry.systemdtest.$$" "$boot_entry" || finish 1
}

activate() {
	echo "activating the configuration..." >&2
	[ "$delay" = 0.000 ] || sleep "$delay"
	replace_link "$self" /run/current-system || finish 1
	echo "setting up /run/systemd/system/$unit..." >&2
	sed "s|@out@|$self|g" "$self/etc/systemd/system/$unit" > "/run/systemd/system/$unit.systemdtest.$$" &&
		mv "/run/systemd/system/$unit.systemdtest.$$" "/run/systemd/system/$unit" || finish 1
	systemctl daemon-reload || finish 1
	echo "restarting the following units: $unit" >&2
	if ! systemctl restart "$unit"; then
		echo "warning: the following units failed: $unit" >&2
		systemctl status --no-pager --lines=3 "$unit" >&2
		finish 4
	fi
	finish 0
}

# Another switch holds the lock: exit 11, as NixOS does.
mkdir -p /run/nixos
exec 8>>/run/nixos/switch-to-configuration.lock
if ! flock -n 8; then
	echo "Could not acquire lock" >&2
	finish 11
fi

case "$action" in
test)
	activate
	;;
boot)
	install_bootloader
	finish 0
	;;
switch)
	install_bootloader
	activate
	;;
dry-activate)
	echo "would restart the following units: $unit" >&2
	finish 0
	;;
esac
`

// unitFile is the unit b installs: its description names the system it
// belongs to (@out@, filled in by the activation).
func (b Behaviour) unitFile() string {
	pre := ""
	if b.ReadsKey != "" {
		pre = fmt.Sprintf("ExecStartPre=/bin/sh -c 'sha256sum < %s > %s'\n", b.ReadsKey, KeyReadPath)
	}
	return fmt.Sprintf("[Unit]\nDescription=systemdtest %s of @out@\n\n[Service]\n%s%s", b.unit(), pre, b.Kind.service())
}

// systemTools are the commands a system closure's sw/bin links, as a NixOS
// system has them: the host's own.
var systemTools = []string{"systemctl", "systemd-run", "journalctl", "systemd-detect-virt", "nix-env"}

// Closure adds a new system closure to the deployer's Nix store (the
// host's /nix, outside every target) and returns its store path: a
// directory with bin/switch-to-configuration, the unit in
// etc/systemd/system and sw/bin, which behaves as b says on any systemdtest
// target. Each call makes a distinct store path, named
// nixos-system-systemdtest-<kind>-<random>.
func Closure(tb TB, b Behaviour) string {
	tb.Helper()
	if err := b.check(); err != nil {
		tb.Fatalf("systemdtest: Closure: %v", err)
	}
	nonce := make([]byte, 5)
	if _, err := rand.Read(nonce); err != nil {
		tb.Fatalf("systemdtest: random name: %v", err)
	}
	name := "nixos-system-systemdtest-" + b.Kind.slug() + "-" + hex.EncodeToString(nonce)
	dir := filepath.Join(tb.TempDir(), name)
	files := []struct {
		rel, text string
		mode      os.FileMode
	}{
		{"bin/switch-to-configuration", b.script(), 0o755},
		{"etc/systemd/system/" + b.unit(), b.unitFile(), 0o644},
		{"nixos-version", name + "\n", 0o644},
	}
	for _, f := range files {
		path := filepath.Join(dir, f.rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatalf("systemdtest: %v", err)
		}
		if err := os.WriteFile(path, []byte(f.text), f.mode); err != nil {
			tb.Fatalf("systemdtest: %v", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "sw", "bin"), 0o755); err != nil {
		tb.Fatalf("systemdtest: %v", err)
	}
	for _, tool := range systemTools {
		if err := os.Symlink("/usr/bin/"+tool, filepath.Join(dir, "sw", "bin", tool)); err != nil {
			tb.Fatalf("systemdtest: %v", err)
		}
	}
	return nixtest.AddToStore(tb, dir)
}
