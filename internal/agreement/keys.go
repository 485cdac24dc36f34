package agreement

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// KeyFile is where and how a key is written on a host: its path, owner,
// group and mode (octal, as chmod takes it), and the units to restart once
// it changed (systemd unit names).
type KeyFile struct {
	Path, User, Group, Mode string
	Units                   []string
}

// KeyFailed starts the host's word that a key could not be written or
// removed; the path and why follow.
const KeyFailed = "fleet: key "

// KeyRecordDir holds, for each deployment, the paths of the keys it wrote
// on the host (a file named for the deployment: a path a line), and the
// units waiting for a restart after a key of theirs changed (the same
// name, ".restart"). Only a path recorded there is ever removed. Under
// RecordDir: a reboot keeps it (a key under /run/keys does not).
const KeyRecordDir = RecordDir + "/keys"

// deploymentName keeps what names a deployment's record to a file name.
var deploymentName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// KeyRecord is the file of deployment's key record on a host (see
// KeyRecordDir).
func KeyRecord(deployment string) string {
	name := deploymentName.ReplaceAllString(deployment, "_")
	if name == "" || strings.Trim(name, ".") == "" {
		name = "default"
	}
	return KeyRecordDir + "/" + name
}

// KeysScript is run's action named action ("keys", "keys-after"):
// fenced, it writes each of writes, in order, from a line of its standard
// input each (the content, base64), printing "wrote N" once the Nth is in
// place; records each of adopts (in place as configured, written before
// the record was kept) as deployment's; and removes each of removes that
// deployment's record names, printing "removed PATH", or "kept PATH: why"
// when it leaves one (not recorded, or something else is there now).
//
// Root never follows what another user could have put in a key's path: a
// key whose directory, or one above it, another user can write (a
// root-owned sticky directory aside) is refused, naming the directory and
// its owner; missing directories are made one at a time (root's, 0755)
// under a checked one; a destination that is not a regular file (a
// directory, a link, a device) is refused, naming it, and nothing is
// written into it; the temporary file root makes is opened once, owned,
// moded and written through that descriptor, and renamed over the
// destination with mv -T. A failure prints KeyFailed, the path and why on
// standard error, and exits 1; the keys before it stand, whole.
func KeysScript(run, action, deployment string, writes []KeyFile, adopts, removes []string) string {
	type write struct{ Path, User, Group, Mode, Units string }
	ws := make([]write, len(writes))
	for i, k := range writes {
		ws[i] = write{Path: k.Path, User: k.User, Group: k.Group, Mode: k.Mode, Units: strings.Join(k.Units, " ")}
	}
	return Remote(fenceScript + render(keysTmpl, struct {
		Run, Action, Record, RecordDir, KeyFailed, KeyPath string
		Writes                                             []write
		Adopts, Removes                                    []string
	}{
		Run: run, Action: action, Record: KeyRecord(deployment), RecordDir: KeyRecordDir, KeyFailed: KeyFailed, KeyPath: keyPath,
		Writes: ws, Adopts: adopts, Removes: removes,
	}))
}

// keyPath defines the rule of a key's path (scripts/keypath.sh):
// fleet_dir_safe, fleet_chain_safe and fleet_walk.
var keyPath = render(keyPathTmpl, nil)

// KeyLargest is the largest file the key query reads: a key is a
// password, a token or a certificate; something larger at a key's path is
// not one (a file a user planted there).
const KeyLargest = 1 << 20

// KeysQueryScript prints a line for each of paths: "present DIGEST USER
// GROUP MODE" (the SHA-256 of its content, computed on the host within
// ten seconds; the mode in octal), "other" when something other than a
// regular file is there, "large" for a file larger than KeyLargest,
// "unsafe WHY" when the path breaks the rule of a key's path (keypath.sh:
// nothing there is read), or "missing"; then "recorded PATH" for each path
// deployment's key record names, and "restart UNIT" for each unit waiting
// for a restart; then "end". Root reads only what the rule lets it: never
// through another user's link, never a FIFO, never without a bound.
func KeysQueryScript(deployment string, paths []string) string {
	var b strings.Builder
	b.WriteString(keyPath + "\nfor fleet_f in")
	for _, p := range paths {
		b.WriteString(" " + shell.Quote(p))
	}
	rec := shell.Quote(KeyRecord(deployment))
	b.WriteString(`; do
if ! fleet_walk "${fleet_f%/*}"; then printf 'unsafe %s\n' "$fleet_why"; continue; fi
[ -z "$fleet_n" ] || { echo missing; continue; }
fleet_g=${fleet_d%/}/${fleet_f##*/}
if [ -L "$fleet_g" ] || { [ -e "$fleet_g" ] && [ ! -f "$fleet_g" ]; }; then echo other; continue; fi
[ -f "$fleet_g" ] || { echo missing; continue; }
fleet_m=$(stat -c '%s %U %G %a' -- "$fleet_g" 2>/dev/null) || { echo other; continue; }
set -f; set -- $fleet_m; set +f
[ "$1" -le ` + strconv.Itoa(KeyLargest) + ` ] || { echo large; continue; }
fleet_m="$2 $3 $4"
fleet_s=$(timeout 10 sha256sum -- "$fleet_g" 2>/dev/null) || fleet_s=unreadable
set -f; set -- $fleet_s; set +f
echo "present $1 $fleet_m"
done
[ ! -f ` + rec + ` ] || while IFS= read -r fleet_f; do [ -z "$fleet_f" ] || printf 'recorded %s\n' "$fleet_f"; done < ` + rec + `
[ ! -f ` + rec + `.restart ] || while IFS= read -r fleet_f; do [ -z "$fleet_f" ] || printf 'restart %s\n' "$fleet_f"; done < ` + rec + `.restart
echo end
`)
	return Remote(b.String())
}

// RestartScript is run's restart action named action ("restart",
// "restart-after"): fenced, it restarts units (the units of the keys that
// changed), then clears deployment's units waiting for a restart (the
// deployer restarts those too).
func RestartScript(run, action, deployment string, units []string) string {
	quoted := make([]string, len(units))
	for i, u := range units {
		quoted[i] = shell.Quote(u)
	}
	return Remote(fenceScript + "fleet_fence " + shell.Quote(run) + " " + shell.Quote(action) + "\nsystemctl restart -- " + strings.Join(quoted, " ") + " && rm -f -- " + shell.Quote(KeyRecord(deployment)+".restart") + "\n")
}

// RebootScript is run's reboot action: fenced, it asks systemd to reboot
// the host. The lease ends with the host's sessions; whatever comes after
// is another run's.
func RebootScript(run string) string {
	return Remote(fenceScript + "fleet_fence " + shell.Quote(run) + " reboot\nsystemctl reboot\n")
}
