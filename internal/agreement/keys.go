package agreement

import (
	"strings"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// KeyFile is where and how a key is written on a host: its path, owner,
// group and mode (octal, as chmod takes it).
type KeyFile struct {
	Path, User, Group, Mode string
}

// KeyFailed starts the host's word that a key could not be written or
// removed; the path and why follow.
const KeyFailed = "fleet: key "

// keysPrelude defines fleet_key PATH USER GROUP MODE, which writes the
// next line of standard input (the key's content, base64) to PATH
// atomically: a temporary file in PATH's directory (created 0755 when
// missing), its owner, group and mode set while it is empty, then the
// content, then renamed over PATH. The content passes through the shell's
// builtins and base64's standard input only: never an argument list.
// A failure removes the temporary file, prints KeyFailed, the path and
// why on standard error, and exits 1.
const keysPrelude = `umask 077
fleet_key_fail() { rm -f -- "$fleet_t"; echo "` + KeyFailed + `$1: $2" >&2; exit 1; }
fleet_key() {
fleet_t=
fleet_d=$(dirname -- "$1")
[ -d "$fleet_d" ] || mkdir -p -m 0755 -- "$fleet_d" 2>/dev/null || fleet_key_fail "$1" "its directory $fleet_d cannot be created"
fleet_t=$(mktemp -- "$fleet_d/.fleet-key.XXXXXX" 2>/dev/null) || { fleet_t=; fleet_key_fail "$1" "its directory $fleet_d is not writable"; }
id -u -- "$2" >/dev/null 2>&1 || fleet_key_fail "$1" "the host has no user $2"
getent group -- "$3" >/dev/null 2>&1 || fleet_key_fail "$1" "the host has no group $3"
chown -- "$2:$3" "$fleet_t" 2>/dev/null || fleet_key_fail "$1" "chown $2:$3 failed (the login is not root: set use_sudo)"
chmod -- "$4" "$fleet_t" 2>/dev/null || fleet_key_fail "$1" "chmod $4 failed"
IFS= read -r fleet_c || fleet_key_fail "$1" "its content did not arrive"
printf '%s' "$fleet_c" | base64 -d > "$fleet_t" 2>/dev/null || fleet_key_fail "$1" "its content could not be written"
fleet_c=
mv -f -- "$fleet_t" "$1" 2>/dev/null || fleet_key_fail "$1" "the written file could not be renamed to it"
}
fleet_key_rm() {
rm -f -- "$1" 2>/dev/null || { echo "` + KeyFailed + `$1: could not be removed" >&2; exit 1; }
}
`

// KeysScript is run's action named action ("keys", "keys-after"):
// fenced, it writes each of writes, in order, from a line of its standard
// input each (KeyInput), and removes each of removes.
func KeysScript(run, action string, writes []KeyFile, removes []string) string {
	var b strings.Builder
	b.WriteString(fenceScript)
	b.WriteString("fleet_fence " + shell.Quote(run) + " " + shell.Quote(action) + "\n")
	b.WriteString(keysPrelude)
	for _, k := range writes {
		b.WriteString("fleet_key " + shell.Quote(k.Path) + " " + shell.Quote(k.User) + " " + shell.Quote(k.Group) + " " + shell.Quote(k.Mode) + "\n")
	}
	for _, p := range removes {
		b.WriteString("fleet_key_rm " + shell.Quote(p) + "\n")
	}
	return Remote(b.String())
}

// KeysQueryScript prints a line for each of paths: "present DIGEST USER
// GROUP MODE" (the SHA-256 of its content, computed on the host; the mode
// in octal), "other" when it is not a regular file, or "missing".
func KeysQueryScript(paths []string) string {
	var b strings.Builder
	b.WriteString("for fleet_f in")
	for _, p := range paths {
		b.WriteString(" " + shell.Quote(p))
	}
	b.WriteString(`; do
if [ -L "$fleet_f" ] || { [ -e "$fleet_f" ] && [ ! -f "$fleet_f" ]; }; then echo other
elif [ -f "$fleet_f" ]; then
fleet_s=$(sha256sum < "$fleet_f" 2>/dev/null) || fleet_s=unreadable
fleet_m=$(stat -c '%U %G %a' -- "$fleet_f" 2>/dev/null) || fleet_m='? ? ?'
echo "present ${fleet_s%% *} $fleet_m"
else echo missing
fi
done
`)
	return Remote(b.String())
}

// RestartScript is run's restart action: fenced, it restarts units (the
// units of keys that changed without a new system).
func RestartScript(run string, units []string) string {
	quoted := make([]string, len(units))
	for i, u := range units {
		quoted[i] = shell.Quote(u)
	}
	return Remote(fenceScript + "fleet_fence " + shell.Quote(run) + " restart\nsystemctl restart -- " + strings.Join(quoted, " ") + "\n")
}

// RebootScript is run's reboot action: fenced, it asks systemd to reboot
// the host. The lease ends with the host's sessions; whatever comes after
// is another run's.
func RebootScript(run string) string {
	return Remote(fenceScript + "fleet_fence " + shell.Quote(run) + " reboot\nsystemctl reboot\n")
}
