#!/bin/sh
# The keys action (KeysScript), after fleet_fence's definition (fence.sh):
# fenced as ACTION, it writes each key from a line of its standard input,
# records it, and removes the keys this deployment wrote that it no longer
# has. It runs as root, in directories a host's other users may reach:
# root never follows what another user could have put in a key's path.
fleet_fence {{q .Run}} {{q .Action}}
{{.KeyPath}}
umask 077
fleet_t= fleet_rec={{q .Record}}
# A failure removes the temporary file (root's, in a checked directory),
# says which key and why on standard error, and exits 1.
fleet_key_fail() { [ -z "$fleet_t" ] || rm -f -- "$fleet_t"; echo "{{.KeyFailed}}$1: $2" >&2; exit 1; }
# fleet_key_dir KEY: fleet_d is the real path of KEY's directory, walked
# as keypath.sh says, its missing directories made one at a time (root's,
# 0755) under a safe one, each checked in turn.
fleet_key_dir() {
fleet_walk "${1%/*}" || fleet_key_fail "$1" "$fleet_why: nothing was written (give the key a destination in a directory only root can write, such as /run/keys)"
while [ -n "$fleet_n" ]; do
fleet_h=${fleet_n%"${fleet_n#*/}"}; fleet_n=${fleet_n#*/}
fleet_d=${fleet_d%/}/${fleet_h%/}
(umask 022 && mkdir -- "$fleet_d") 2>/dev/null || fleet_key_fail "$1" "its directory $fleet_d cannot be created"
fleet_dir_safe "$fleet_d" || fleet_key_fail "$1" "$fleet_why: nothing was written"
done
}
# fleet_not_file KEY PATH: fails KEY when something other than a regular
# file is at PATH (a directory, a link, a device), naming it.
fleet_not_file() {
if [ -L "$2" ]; then fleet_key_fail "$1" "a link is at it (to $(readlink -- "$2")), not a file: nothing was written (remove it, or give the key another destination)"; fi
if [ -e "$2" ] && [ ! -f "$2" ]; then fleet_key_fail "$1" "a $(stat -c %F -- "$2") is at it, not a file: nothing was written (remove it, or give the key another destination)"; fi
}
# fleet_record KEY: KEY is recorded as this deployment's (once), so that
# only what it wrote is ever removed.
fleet_record() {
[ -d {{q .RecordDir}} ] || (umask 022 && mkdir -p -- {{q .RecordDir}}) || fleet_key_fail "$1" "its record under {{.RecordDir}} cannot be made"
grep -qxF -- "$1" "$fleet_rec" 2>/dev/null || { printf '%s\n' "$1" >> "$fleet_rec" && fleet_log "$fleet_run_dir" recorded key "$1"; } || fleet_key_fail "$1" "its record under {{.RecordDir}} cannot be written"
}
# fleet_key N KEY USER GROUP MODE UNITS: writes the next line of standard
# input (the key's content, base64) to KEY: a temporary file root makes
# (mktemp: a new name, 0600) in the checked directory, opened once
# (descriptor 3); its owner and mode set through that descriptor while it
# is empty; the content written through it; then renamed over KEY (mv -T:
# never into a directory). The content passes through the shell's
# builtins and base64's standard input only: never an argument list.
# UNITS (the key's restart_units) are recorded as waiting for a restart
# before the rename, so that a deploy cut short after it still restarts
# them. "wrote N" says it is in place.
fleet_key() {
fleet_t=
fleet_key_dir "$2"
fleet_f=${fleet_d%/}/${2##*/}
fleet_not_file "$2" "$fleet_f"
id -u -- "$3" >/dev/null 2>&1 || fleet_key_fail "$2" "the host has no user $3"
getent group -- "$4" >/dev/null 2>&1 || fleet_key_fail "$2" "the host has no group $4"
for fleet_o in "$fleet_d"/.fleet-key.*; do [ -f "$fleet_o" ] && [ ! -L "$fleet_o" ] && [ "$(stat -c %u -- "$fleet_o")" = 0 ] && rm -f -- "$fleet_o"; done
fleet_t=$(mktemp -- "$fleet_d/.fleet-key.XXXXXX" 2>/dev/null) || { fleet_t=; fleet_key_fail "$2" "its directory $fleet_d is not writable"; }
exec 3<>"$fleet_t" || fleet_key_fail "$2" "its temporary file cannot be opened"
fleet_i=$(stat -c '%d:%i:%u:%h:%F' -- "$fleet_t")
[ "$fleet_i" = "$(stat -L -c '%d:%i:%u:%h:%F' /proc/self/fd/3)" ] && [ "${fleet_i#*:*:}" = "0:1:regular empty file" ] || fleet_key_fail "$2" "its temporary file is not the one root made: nothing was written"
chown -- "$3:$4" /proc/self/fd/3 2>/dev/null || fleet_key_fail "$2" "chown $3:$4 failed (the login is not root: set use_sudo)"
chmod -- "$5" /proc/self/fd/3 2>/dev/null || fleet_key_fail "$2" "chmod $5 failed"
IFS= read -r fleet_c || fleet_key_fail "$2" "its content did not arrive"
printf '%s' "$fleet_c" | base64 -d >&3 2>/dev/null || fleet_key_fail "$2" "its content could not be written"
fleet_c=
exec 3>&-
[ "$(stat -c '%d:%i' -- "$fleet_t" 2>/dev/null)" = "${fleet_i%:*:*:*}" ] || fleet_key_fail "$2" "its temporary file was replaced: nothing was written"
[ -z "$6" ] || { [ -d {{q .RecordDir}} ] || (umask 022 && mkdir -p -- {{q .RecordDir}}); printf '%s\n' $6 >> "$fleet_rec.restart"; } || fleet_key_fail "$2" "its units' restart cannot be recorded"
mv -T -f -- "$fleet_t" "$fleet_f" 2>/dev/null || fleet_key_fail "$2" "the written file could not be renamed to it (is something other than a file there now?)"
fleet_t=
fleet_log "$fleet_run_dir" wrote key "$2"
fleet_record "$2"
echo "wrote $1"
}
# fleet_key_rm KEY: removes KEY, a file this deployment wrote (its record
# names it) and no other deployment's record names, unless something else
# is there now; its record goes either way. "removed KEY", or "kept KEY:
# why". Its directory is walked as a write's is: a removal never follows
# another user's link either.
fleet_key_rm() {
if ! grep -qxF -- "$1" "$fleet_rec" 2>/dev/null; then echo "kept $1: this deployment's record on the host does not name it (not written by it)"; return 0; fi
fleet_o=
for fleet_x in {{.RecordDir}}/*; do
case $fleet_x in "$fleet_rec"|*.restart|*.new) continue ;; esac
[ -f "$fleet_x" ] && grep -qxF -- "$1" "$fleet_x" 2>/dev/null && fleet_o=${fleet_x##*/}
done
if [ -n "$fleet_o" ]; then echo "kept $1: deployment $fleet_o's record on the host names it too"
elif ! fleet_walk "${1%/*}"; then fleet_key_fail "$1" "$fleet_why: it was not removed"
elif [ -n "$fleet_n" ]; then echo "removed $1"
else
fleet_f=${fleet_d%/}/${1##*/}
if [ -L "$fleet_f" ] || { [ -e "$fleet_f" ] && [ ! -f "$fleet_f" ]; }; then echo "kept $1: a $(stat -c %F -- "$fleet_f") is there now, not the file this deployment wrote"
else rm -f -- "$fleet_f" 2>/dev/null || fleet_key_fail "$1" "could not be removed"; fleet_log "$fleet_run_dir" removed key "$1"; echo "removed $1"; fi
fi
grep -vxF -- "$1" "$fleet_rec" > "$fleet_rec.new" 2>/dev/null; mv -f -- "$fleet_rec.new" "$fleet_rec" || fleet_key_fail "$1" "its record under {{.RecordDir}} cannot be written"
fleet_log "$fleet_run_dir" recorded key-gone "$1"
# A record that names nothing any more goes.
[ -s "$fleet_rec" ] || rm -f -- "$fleet_rec"
}
{{range $i, $k := .Writes}}fleet_key {{$i}} {{q $k.Path}} {{q $k.User}} {{q $k.Group}} {{q $k.Mode}} {{q $k.Units}}
{{end -}}
{{range .Adopts}}fleet_record {{q .}}
{{end -}}
{{range .Removes}}fleet_key_rm {{q .}}
{{end -}}
