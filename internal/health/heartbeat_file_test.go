package health

import (
	"bytes"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Hostile hosts and planted files: the provider runs as a user (root here)
// that can write where others cannot, and a checked directory may be
// writable by a service account. Whatever that account planted in it, a
// heartbeat never writes through it: not through a symbolic link, not
// through a hard link, not into a name it did not create itself.

// serviceAccount is another user of the machine, one that owns a checked
// directory: its uid and gid.
func serviceAccount(t *testing.T) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup(sshtest.LoginUser(t))
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// asAccount runs argv as uid:gid and fails the test if it fails.
func asAccount(t *testing.T, uid, gid int, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %q: %v: %s", uid, argv, err, out)
	}
}

// plantedDir makes root/blobs, owned by the service account (so it can
// write there), and root/secret beside it, a file of root's that the
// account cannot write, which a planted link will point at. root and its
// parent become searchable by all, so the account can reach blobs.
func plantedDir(t *testing.T, uid, gid int) (root, blobs, secret string) {
	t.Helper()
	root = t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	blobs = filepath.Join(root, "blobs")
	if err := os.Mkdir(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(blobs, uid, gid); err != nil {
		t.Fatal(err)
	}
	secret = filepath.Join(root, "secret")
	if err := os.WriteFile(secret, []byte("root:$y$the-password-hash:19000:0:99999:7:::\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An mtime in the past: a write through the link would move it.
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	if err := os.Chtimes(secret, past, past); err != nil {
		t.Fatal(err)
	}
	return root, blobs, secret
}

// plant makes a link to secret at link, as a service account would.
type plant struct {
	name string
	make func(t *testing.T, uid, gid int, secret, link string)
	// still checks, after the evaluation, that link is still what was
	// planted: the heartbeat neither followed nor replaced it.
	still func(t *testing.T, secret, link string)
}

var plants = []plant{
	{
		name: "symlink",
		make: func(t *testing.T, uid, gid int, secret, link string) {
			asAccount(t, uid, gid, "ln", "-s", secret, link)
		},
		still: func(t *testing.T, secret, link string) {
			if got, err := os.Readlink(link); err != nil || got != secret {
				t.Errorf("planted symlink %s: now %q, %v; want it still pointing at %s", link, got, err, secret)
			}
		},
	},
	{
		// fs.protected_hardlinks (on in most kernels) stops the account
		// from linking a file of root's; a node where it is off would not,
		// and root plants the link that such a node allows.
		name: "hard link",
		make: func(t *testing.T, _, _ int, secret, link string) {
			if err := os.Link(secret, link); err != nil {
				t.Fatal(err)
			}
		},
		still: func(t *testing.T, secret, link string) {
			a, err1 := os.Lstat(secret)
			b, err2 := os.Lstat(link)
			if err1 != nil || err2 != nil || !os.SameFile(a, b) {
				t.Errorf("planted hard link %s: %v, %v; want it still the same file as %s", link, err1, err2, secret)
			}
		},
	},
}

// wantUnchanged fails unless secret holds what it held, with the same
// modification time.
func wantUnchanged(t *testing.T, secret string, before []byte, mtime time.Time) {
	t.Helper()
	after, err := os.ReadFile(secret)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, before) {
		t.Errorf("the heartbeat wrote through the planted link: %s now holds %q, was %q", secret, after, before)
	}
	if fi, err := os.Stat(secret); err != nil || !fi.ModTime().Equal(mtime) {
		t.Errorf("%s: modified at %v (%v), was %v: the heartbeat wrote through the planted link", secret, fi.ModTime(), err, mtime)
	}
}

// entries lists dir, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}

func TestLocalHeartbeatPlantedLinks(t *testing.T) {
	t.Parallel()
	checkPlantedLinks(t, Node{Local: true})
}
func TestSSHDHeartbeatPlantedLinks(t *testing.T) {
	t.Parallel()
	checkPlantedLinks(t, sshdNode(sshtest.StartSSHD(t)))
}

// checkPlantedLinks: a checked directory a service account can write holds
// `_heartbeat`, the heartbeat file's name before issue 22, as a link (symbolic
// or hard) to a file of root's outside it. The evaluation writes a
// heartbeat, the node is healthy, the linked file is unchanged, the link is
// still there as planted, and no heartbeat file is left in the directory.
func checkPlantedLinks(t *testing.T, n Node) {
	uid, gid := serviceAccount(t)
	for _, pl := range plants {
		t.Run(pl.name, func(t *testing.T) {
			root, blobs, secret := plantedDir(t, uid, gid)
			link := filepath.Join(blobs, "_heartbeat")
			pl.make(t, uid, gid, secret, link)
			before, err := os.ReadFile(secret)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(secret)
			if err != nil {
				t.Fatal(err)
			}
			node := uniqueNode(t, "planted")
			p := pathPolicy(root, node, n, 5*time.Second)
			forgetMarkers(t, p, node)

			r, _ := evalNode(t, newEvaluator(nil), p, node)
			res := result(t, r, "path:"+blobs)
			if r.State() != StateHealthy || res.Tier != TierHeartbeat || res.Detail != "heartbeat written" {
				t.Errorf("with a planted %s: %s; want healthy, heartbeat written", pl.name, describeReport(r, p))
			}
			wantUnchanged(t, secret, before, fi.ModTime())
			pl.still(t, secret, link)
			if got := entries(t, blobs); !slices.Equal(got, []string{"_heartbeat"}) {
				t.Errorf("after the heartbeat %s holds %q; want only the planted link, no heartbeat file left", blobs, got)
			}
		})
	}
}

// TestLocalHeartbeatNameTaken: the heartbeat's file is created by the write
// itself, exclusively, so a name that another user made between the moment
// the heartbeat picked it and the write (here: a stand-in mktemp names a
// link planted in advance) is refused rather than written through or
// removed, and the check says so.
func TestLocalHeartbeatNameTaken(t *testing.T) {
	t.Parallel()
	uid, gid := serviceAccount(t)
	for _, pl := range plants {
		t.Run(pl.name, func(t *testing.T) {
			root, blobs, secret := plantedDir(t, uid, gid)
			taken := filepath.Join(blobs, HeartbeatPrefix+"planted")
			for _, link := range []string{taken, filepath.Join(blobs, "_heartbeat")} {
				pl.make(t, uid, gid, secret, link)
			}
			before, err := os.ReadFile(secret)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(secret)
			if err != nil {
				t.Fatal(err)
			}
			// The stand-in answers the heartbeat's template with the
			// taken name, and leaves every other use to the real mktemp.
			bin := t.TempDir()
			writeExecutable(t, bin, "mktemp", `case "$*" in *`+shell.Quote("/"+HeartbeatPrefix+"XXXXXX")+`) echo `+shell.Quote(taken)+`; exit 0 ;; esac
exec `+shell.Quote(lookPath(t, "mktemp", "coreutils"))+` "$@"
`)
			node := uniqueNode(t, "taken")
			p := pathPolicy(root, node, Node{Local: true}, 5*time.Second)
			forgetMarkers(t, p, node)

			e := newEvaluator([]string{"env", "PATH=" + bin + ":" + os.Getenv("PATH"), "/bin/sh", "-s"})
			r, _ := evalNode(t, e, p, node)
			res := result(t, r, "path:"+blobs)
			if r.State() != StateError || res.Tier != TierHeartbeat || res.Detail != "heartbeat write failed: file exists" {
				t.Errorf("heartbeat name taken by a planted %s: %s; want heartbeat write failed: file exists", pl.name, describeReport(r, p))
			}
			wantUnchanged(t, secret, before, fi.ModTime())
			pl.still(t, secret, taken)
			if got, want := entries(t, blobs), []string{HeartbeatPrefix + "planted", "_heartbeat"}; !slices.Equal(got, want) {
				t.Errorf("after the heartbeat %s holds %q; want only the planted links %q", blobs, got, want)
			}
		})
	}
}

// TestLocalHeartbeatWriteFails: a heartbeat whose write fails after its
// file was made (a full file system: the create takes an inode, the write
// finds no block) says why in plain words and removes the file it made.
func TestLocalHeartbeatWriteFails(t *testing.T) {
	t.Parallel()
	h := localHost(t)
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs")
	if err := os.Mkdir(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	h.ns.Run(t, "mount", "-t", "tmpfs", "-o", "size=64k", "sshtest-full", blobs)
	h.ns.Run(t, "sh", "-c", `dd if=/dev/zero of="$1/fill" bs=4096 2>/dev/null; test -s "$1/fill"`, "sh", blobs)
	node := uniqueNode(t, "full")
	p := pathPolicy(root, node, h.node, 5*time.Second)
	forgetMarkers(t, p, node)

	r, _ := evalNode(t, h.evaluator(), p, node)
	res := result(t, r, "path:"+blobs)
	if r.State() != StateError || res.Tier != TierHeartbeat || res.Detail != "heartbeat write failed: no space left on device" {
		t.Errorf("a full file system: %s; want heartbeat write failed: no space left on device", describeReport(r, p))
	}
	if list := h.ns.Run(t, "ls", "-A", blobs); list != "fill\n" {
		t.Errorf("after the failed heartbeat %s holds %q; want only the file that filled it", blobs, list)
	}
}

// TestLocalHeartbeatNotRemoved: a heartbeat whose file cannot be removed
// (here a stand-in rm refuses it, as on an append-only directory) is
// unhealthy and says so; the next heartbeat that can removes that file
// first, so none piles up.
func TestLocalHeartbeatNotRemoved(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	blobs := filepath.Join(root, "blobs")
	if err := os.Mkdir(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	writeExecutable(t, bin, "rm", `for a; do last=$a; done
case "$last" in *`+shell.Quote("/"+HeartbeatPrefix)+`*) echo "rm: cannot remove '$last': Operation not permitted" >&2; exit 1 ;; esac
exec `+shell.Quote(lookPath(t, "rm", "coreutils"))+` "$@"
`)
	node := uniqueNode(t, "not-removed")
	p := pathPolicy(root, node, Node{Local: true}, 5*time.Second)
	forgetMarkers(t, p, node)

	e := newEvaluator([]string{"env", "PATH=" + bin + ":" + os.Getenv("PATH"), "/bin/sh", "-s"})
	r, _ := evalNode(t, e, p, node)
	res := result(t, r, "path:"+blobs)
	if r.State() != StateError || res.Tier != TierHeartbeat || res.Detail != "heartbeat file not removed: operation not permitted" {
		t.Errorf("rm refused: %s; want heartbeat file not removed: operation not permitted", describeReport(r, p))
	}
	left := entries(t, blobs)
	if len(left) != 1 || !strings.HasPrefix(left[0], HeartbeatPrefix) || len(left[0]) != len(HeartbeatPrefix)+6 {
		t.Fatalf("after the refused remove %s holds %q; want the one heartbeat file", blobs, left)
	}

	r, _ = evalNode(t, newEvaluator(nil), p, node)
	if res := result(t, r, "path:"+blobs); r.State() != StateHealthy || res.Detail != "heartbeat written" {
		t.Errorf("with rm working again: %s", describeReport(r, p))
	}
	if got := entries(t, blobs); len(got) != 0 {
		t.Errorf("after the next heartbeat %s holds %q; want the file left before removed too", blobs, got)
	}
}
