#!/bin/sh
# The rule of a key's path (keyPath), which the keys action and the key
# query run first: root never follows what another user could have put in
# a key's path. Each function says why not in fleet_why, and returns 1.
#
# fleet_dir_safe DIR: DIR is a directory of root's (not a link) that no
# other user can write: no access control list, not writable by others,
# nor by a group other than root's, unless sticky (as /tmp: there others
# cannot move or remove root's entries).
fleet_dir_safe() {
fleet_s=$(LC_ALL=C ls -ldn -- "$1" 2>/dev/null) || { fleet_why="its directory $1 cannot be read"; return 1; }
set -f; set -- "$1" $fleet_s; set +f
case $2 in
d*) ;;
l*) fleet_why="$1 is a link"; return 1 ;;
*) fleet_why="$1 is not a directory"; return 1 ;;
esac
[ "$4" = 0 ] || { fleet_why="its directory $1 is owned by $(stat -c %U -- "$1"), not root, who could swap what root writes there"; return 1; }
case $2 in ??????????+*) fleet_why="its directory $1 has an access control list (getfacl $1), which may let another user write there"; return 1 ;; esac
case $2 in ?????????[tT]*) return 0 ;; esac
case $2 in ????????w*) fleet_why="its directory $1 can be written by every user (mode $(stat -c %a -- "$1"))"; return 1 ;; esac
case $2 in ?????w*) [ "$5" = 0 ] || { fleet_why="its directory $1 can be written by group $(stat -c %G -- "$1") (mode $(stat -c %a -- "$1"))"; return 1; } ;; esac
return 0
}
# fleet_chain_safe REAL: every directory from / to REAL (a real path: no
# link in it) is safe.
fleet_chain_safe() {
fleet_cc=/ fleet_cr=${1#/}
[ -z "$fleet_cr" ] || fleet_cr=$fleet_cr/
while :; do
fleet_dir_safe "$fleet_cc" || return 1
[ -n "$fleet_cr" ] || return 0
fleet_ch=${fleet_cr%"${fleet_cr#*/}"}; fleet_cr=${fleet_cr#*/}
fleet_cc=${fleet_cc%/}/${fleet_ch%/}
done
}
# fleet_walk DIR: walks DIR (a directory's path, as configured) from /, as
# the kernel would: each directory it meets safe; a link it meets (in a
# safe directory: root made it) root's, and the real path it leads to
# safe all the way. fleet_d is the real path of the deepest directory of
# DIR that exists, fleet_n what is missing below it ("a/b/": each made in
# turn, under fleet_d, by the caller).
fleet_walk() {
fleet_d=/ fleet_n= fleet_r=${1#/}
[ -z "$fleet_r" ] || fleet_r=$fleet_r/
fleet_dir_safe / || return 1
while [ -n "$fleet_r" ]; do
fleet_h=${fleet_r%"${fleet_r#*/}"}; fleet_r=${fleet_r#*/}
fleet_x=${fleet_d%/}/${fleet_h%/}
if [ -L "$fleet_x" ]; then
[ "$(stat -c %u -- "$fleet_x")" = 0 ] || { fleet_why="$fleet_x is a link of $(stat -c %U -- "$fleet_x")'s, not root's"; return 1; }
fleet_x=$(readlink -e -- "$fleet_x") || { fleet_why="$fleet_x is a link that leads nowhere"; return 1; }
fleet_chain_safe "$fleet_x" || return 1
elif [ -e "$fleet_x" ]; then
fleet_dir_safe "$fleet_x" || return 1
else
fleet_n=$fleet_h$fleet_r; return 0
fi
fleet_d=$fleet_x
done
}
