package nixtest

// wrappedTools are the commands a target's bin directory wraps (see
// Hostile.Arm, Target.Writes): what a deployer writes files with as root.
var wrappedTools = []string{"chown", "chmod", "mv", "rm", "mkdir", "base64", "ln", "cp", "install", "touch", "mktemp"}

// armedFile, in the state directory, holds the hostile user's uid, gid,
// bait and armed attacks ("UID GID BAIT ATTACK,ATTACK"); it exists only
// while the user is armed.
const armedFile = "hostile/armed"

// wrapperScript is the stand-in for tool, whose real command is realPath. Not
// armed, it costs a test(1) of a file and an exec: it runs on every
// deploy's commands. base64 also looks for a decode (Target.Writes).
func wrapperScript(tool, realPath string) string {
	head := "#!/bin/sh\n# nixtest wrapper for " + tool + ": transparent unless a hostile user is armed (Hostile.Arm).\n"
	if tool == "base64" {
		return head + `for a; do
	case $a in
	--) break ;;
	-d|--decode|-[!-]*d*) exec ` + stateLink + `/libexec/hostile-wrap ` + tool + ` ` + realPath + ` "$@" ;;
	esac
done
[ -e ` + stateLink + `/` + armedFile + ` ] || exec ` + realPath + ` "$@"
exec ` + stateLink + `/libexec/hostile-wrap ` + tool + ` ` + realPath + ` "$@"
`
	}
	return head + `[ -e ` + stateLink + `/` + armedFile + ` ] || exec ` + realPath + ` "$@"
exec ` + stateLink + `/libexec/hostile-wrap ` + tool + ` ` + realPath + ` "$@"
`
}

// hostileWrapScript is libexec/hostile-wrap TOOL REAL ARGS...: what a
// wrapper runs once a hostile user is armed, or for a base64 decode. As
// root, it records a base64 decode into a regular file (path, mode and
// owner as the content is written: a "write" event); armed, it runs the
// armed attacks as the hostile user just before and just after the real
// command at each path argument (base64: its standard output; mktemp:
// what it made, after) that lies in a directory the user may write: owns,
// or group- or other-writable (sticky: to create an entry, or replace its
// own).
const hostileWrapScript = `#!/bin/sh
tool=$1 real=$2
shift 2
state=` + stateLink + `
user_path=$PATH
PATH=/usr/bin:/bin
nl='
'
[ "$(id -u)" = 0 ] || { PATH=$user_path; exec "$real" "$@"; }
armed=
[ -z "${NIXTEST_HARNESS:-}" ] && [ -f "$state/` + armedFile + `" ] && read -r huid hgid bait attacks < "$state/` + armedFile + `" && armed=1

out=
if [ "$tool" = base64 ] && [ -f /proc/$$/fd/1 ]; then
	out=$(readlink /proc/$$/fd/1)
	decode=
	for a; do
		case $a in
		--) break ;;
		-d|--decode|-[!-]*d*) decode=1 ;;
		esac
	done
	if [ -n "$decode" ]; then
		# The file as the content goes in: a mode or owner it takes
		# only later was too late.
		printf '%s 0 write %s %s\n' "$(date +%s.%N)" "$(stat -L -c '%a %U:%G' /proc/$$/fd/1)" "$out" >> "$state/events.log"
	fi
fi
[ -n "$armed" ] || { PATH=$user_path; exec "$real" "$@"; }

# writable PATH: whether the hostile user may replace PATH (the directory
# holding it) or, when it is missing, create its first missing component.
# In a sticky directory (as /tmp) anyone may create an entry, and replace
# only its own.
writable() {
	w=$1 e=
	if [ -e "$w" ] || [ -L "$w" ]; then
		e=$w
		w=${w%/*}
	else
		while [ -n "$w" ] && [ ! -e "$w" ] && [ ! -L "$w" ]; do w=${w%/*}; done
	fi
	[ -n "$w" ] || w=/
	set -- $(stat -L -c '%u %g %a' -- "$w" 2>/dev/null)
	[ $# = 3 ] || return 1
	m=$((0$3))
	[ "$1" = "$huid" ] && return 0
	if [ $((m & 512)) != 0 ]; then
		[ $((m & 2)) != 0 ] || return 1
		[ -z "$e" ] || [ "$(stat -c %u -- "$e" 2>/dev/null)" = "$huid" ]
		return
	fi
	[ $((m & 2)) = 0 ] || return 0
	[ "$2" = "$hgid" ] && [ $((m & 16)) != 0 ]
}
targets= touched=
target() {
	p=$1
	case $p in
	'') return ;;
	/*) ;;
	*) p=$PWD/$p ;;
	esac
	while [ "$p" != / ] && [ "${p%/}" != "$p" ]; do p=${p%/}; done
	touched=$touched$p$nl
	writable "$p" && targets=$targets$p$nl
}
# The path arguments: not options, nor their values, nor chown's owner or
# chmod's mode.
# vals are the short options that take a value; pvals those whose value
# is a path.
vals= pvals=
case $tool in
mkdir) vals=m ;;
install) vals=mogSt pvals=t ;;
mv|cp|ln) vals=St pvals=t ;;
touch) vals=drt pvals=r ;;
mktemp) vals=p pvals=p ;;
base64) vals=w ;;
esac
first=
case $tool in chown|chmod) first=1 ;; esac
need= ends=
for a; do
	if [ -n "$need" ]; then
		case $pvals in *"$need"*) target "$a" ;; esac
		need=
		continue
	fi
	if [ -z "$ends" ]; then
		case $a in
		--) ends=1; continue ;;
		--reference=*) first=; target "${a#*=}"; continue ;;
		--target-directory=*|--tmpdir=*) target "${a#*=}"; continue ;;
		--*=*) continue ;;
		--mode|--owner|--group|--suffix|--date|--strip-program) need=-; continue ;;
		--target-directory|--reference) need=/; pvals=$pvals/; [ "$a" = --reference ] && first=; continue ;;
		--*) continue ;;
		-?*)
			last=${a#"${a%?}"}
			case $vals in *"$last"*) need=$last ;; esac
			continue ;;
		esac
	fi
	if [ -n "$first" ]; then first=; continue; fi
	[ "$tool" = mktemp ] || [ "$tool" = base64 ] || target "$a"
done
[ "$tool" = base64 ] && [ -n "$out" ] && target "$out"
printf '%s' "$touched" >> "$state/hostile/touched"

# attack MOMENT: the armed attacks, as the user, at each target.
attack() {
	[ -n "$targets" ] || return 0
	ifs=$IFS; IFS=$nl; set -f
	setpriv --reuid="$huid" --regid="$hgid" --clear-groups -- /bin/sh -s -- "$1" "$tool" "$bait" "$attacks" $targets \
		< "$state/libexec/hostile-attack" >> "$state/events.log" 2>/dev/null
	IFS=$ifs; set +f
}
if [ "$tool" = mktemp ]; then
	made=$(PATH=$user_path "$real" "$@") || exit
	targets=
	target "$made"
	attack after
	printf '%s\n' "$made"
	exit 0
fi
attack before
PATH=$user_path "$real" "$@"
st=$?
attack after
exit $st
`

// hostileAttackScript runs as the hostile user, fed to sh -s: MOMENT
// TOOL BAIT ATTACKS PATH...; it does the first of ATTACKS (comma
// separated) that it can at each PATH, and prints an event line for each
// it did.
const hostileAttackScript = `cd / || exit 1
PATH=/usr/bin:/bin
umask 022
moment=$1 tool=$2 bait=$3 attacks=$4
shift 4
baitdir=${bait%/*}
ev() { printf '%s 0 hostile %s %s:%s %s\n' "$(date +%s.%N)" "$1" "$moment" "$tool" "$2"; }
` + hostileAttacksLib + `
for p; do
	ifs=$IFS; IFS=,
	for a in $attacks; do
		IFS=$ifs
		case $a in
		SwapForLink) swap "$p" && break ;;
		PlantDir) plant "$p" && break ;;
		LinkDirToRoot) linkdir "$p" && break ;;
		esac
	done
	IFS=$ifs
done
exit 0
`

// hostileAttacksLib are the attacks, as shell functions of the hostile
// user's; each succeeds when it did its attack (and printed its event).
const hostileAttacksLib = `# ours PATH: the user's own doing already (a link to the bait or its
# directory, or a directory it made).
ours() {
	if [ -L "$1" ]; then
		l=$(readlink -- "$1")
		[ "$l" = "$bait" ] || [ "$l" = "$baitdir" ]
		return
	fi
	[ -d "$1" ] && [ -O "$1" ]
}
# swap PATH: PATH becomes a link to the bait (moved aside first when it
# is a directory); a missing PATH is made one.
swap() {
	if [ -e "$1" ] || [ -L "$1" ]; then
		! ours "$1" || return 1
		ln -s -- "$bait" "$1.nixtest-hostile.$$" 2>/dev/null || return 1
		if [ -d "$1" ] && [ ! -L "$1" ] && ! mv -T -- "$1" "$1.nixtest-moved.$$" 2>/dev/null; then
			rm -f -- "$1.nixtest-hostile.$$"
			return 1
		fi
		if ! mv -Tf -- "$1.nixtest-hostile.$$" "$1" 2>/dev/null; then
			rm -f -- "$1.nixtest-hostile.$$"
			return 1
		fi
	else
		ln -s -- "$bait" "$1" 2>/dev/null || return 1
	fi
	ev SwapForLink "$1"
}
# plant PATH: a missing PATH becomes a directory of the user's, open to
# all.
plant() {
	[ ! -e "$1" ] && [ ! -L "$1" ] || return 1
	mkdir -- "$1" 2>/dev/null || return 1
	chmod 0777 -- "$1"
	ev PlantDir "$1"
}
# linkdir PATH: the first missing component of PATH becomes a link to
# the bait's directory, root's.
linkdir() {
	c=$1
	[ ! -e "$c" ] && [ ! -L "$c" ] || return 1
	while :; do
		up=${c%/*}
		[ -n "$up" ] || return 1
		if [ -e "$up" ] || [ -L "$up" ]; then break; fi
		c=$up
	done
	ln -s -- "$baitdir" "$c" 2>/dev/null || return 1
	ev LinkDirToRoot "$c"
}
`

// hostileLoopScript runs as the hostile user, fed to sh -s: SEED BAIT
// DIR...; until it is killed it keeps swapping the entries of the user's
// directories (and of their subdirectories) for links to the bait, and
// planting directories and links at names it saw there and that are gone,
// choosing with a generator seeded with SEED.
const hostileLoopScript = `cd / || exit 1
PATH=/usr/bin:/bin
umask 022
r=$(($1 % 2147483648))
bait=$2
shift 2
baitdir=${bait%/*}
moment=loop tool=
ev() { printf '%s 0 hostile %s loop %s\n' "$(date +%s.%N)" "$1" "$2"; }
` + hostileAttacksLib + `
rnd() { r=$(( (r * 1103515245 + 12345) % 2147483648 )); }
nl='
'
names= n=0
while :; do
	for d; do
		[ -d "$d" ] || continue
		for e in "$d"/* "$d"/.[!.]* "$d"/*/* "$d"/*/.[!.]*; do
			[ -e "$e" ] || [ -L "$e" ] || continue
			case "$nl$names" in
			*"$nl$e$nl"*) ;;
			*) names=$names$e$nl; n=$((n + 1)) ;;
			esac
			ours "$e" && continue
			rnd
			[ $((r % 3)) = 0 ] && swap "$e"
		done
	done
	ifs=$IFS; IFS=$nl; set -f
	for e in $names; do
		[ -e "$e" ] || [ -L "$e" ] && continue
		rnd
		case $((r % 4)) in
		0) plant "$e" ;;
		1) swap "$e" ;;
		2) linkdir "$e" ;;
		esac
	done
	IFS=$ifs; set +f
	[ $n -lt 200 ] || { names= n=0; }
	rnd
	sleep 0.0$((r % 5 + 1))
done
`
