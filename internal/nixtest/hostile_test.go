package nixtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// hostileEvents are the event log's attacks of the hostile user.
func hostileEvents(tg *Target) []Event {
	var out []Event
	for _, e := range tg.Events() {
		if e.Kind == "hostile" {
			out = append(out, e)
		}
	}
	return out
}

func containsLine(lines []string, part string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, part) })
}

// The hostile user, armed with SwapForLink, swaps the temporary file root
// just made in the user's directory for a link to root's bait: root's
// chown then changes the bait, and Harmed says so. Unarmed, or in a
// directory of root's, the wrappers change nothing.
func TestHostileSwapForLink(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t)
	d := newDeployer(t, tg)
	h := tg.Hostile(t)
	if h.User() != HostileUserName || h.UID() <= 0 || tg.Hostile(t) != h {
		t.Fatalf("Hostile: user %q uid %d", h.User(), h.UID())
	}
	h.Own("/run/svc")
	fi, err := os.Stat(tg.Path("/run/svc"))
	if err != nil || fi.Mode().Perm() != 0o755 || !fi.IsDir() {
		t.Fatalf("Own: %v %v", fi, err)
	}
	if b, err := os.ReadFile(tg.Path(h.Bait())); err != nil || string(b) != baitContent {
		t.Fatalf("the bait: %q %v", b, err)
	}

	// Unarmed: transparent.
	if got := strings.TrimSpace(d.must(`f=$(mktemp /run/svc/.x.XXXX) && chown nobody "$f" && stat -c '%U %F' "$f"`)); got != "nobody regular empty file" {
		t.Errorf("unarmed: the temporary file is %q, want nobody's, regular", got)
	}
	if harm, ev := h.Harmed(), hostileEvents(tg); len(harm) != 0 || len(ev) != 0 {
		t.Errorf("unarmed: harmed %q, attacks %+v; want none", harm, ev)
	}

	h.Arm(SwapForLink)
	// Armed, in a directory of root's: nothing.
	if got := strings.TrimSpace(d.must(`mkdir -p /run/root && f=$(mktemp /run/root/.x.XXXX) && chown nobody "$f" && stat -c '%U %F' "$f"`)); got != "nobody regular empty file" {
		t.Errorf("armed, a directory of root's: the temporary file is %q, want nobody's, regular", got)
	}
	if harm, ev := h.Harmed(), hostileEvents(tg); len(harm) != 0 || len(ev) != 0 {
		t.Errorf("armed, a directory of root's: harmed %q, attacks %+v; want none", harm, ev)
	}

	// Armed, in the user's directory: the link is followed.
	d.must(`sh -c 'f=$(mktemp /run/svc/.x.XXXX); chown nobody "$f"'`)
	harm := h.Harmed()
	if !containsLine(harm, "the bait "+BaitPath+"'s owner changed from root to nobody") {
		t.Errorf("harmed %q, want the bait's owner changed", harm)
	}
	ev := hostileEvents(tg)
	if len(ev) != 1 || ev[0].Attack != SwapForLink || ev[0].Action != "after:mktemp" || !strings.HasPrefix(ev[0].Path, "/run/svc/.x.") {
		t.Errorf("attacks %+v, want a SwapForLink after mktemp at /run/svc/.x.*", ev)
	} else if l, err := os.Readlink(tg.Path(ev[0].Path)); err != nil || l != BaitPath {
		t.Errorf("%s is %q (%v), want a link to the bait", ev[0].Path, l, err)
	}

	// A write through the link reaches the bait too, and a mv puts the
	// user's link where root meant its file.
	d.must(`f=$(mktemp /run/svc/.y.XXXX) && echo c2VjcmV0Cg== | base64 -d > "$f" && mv -f "$f" /run/root/key`)
	harm = h.Harmed()
	if !containsLine(harm, "content changed: \"secret\\n\"") || !containsLine(harm, "root put the user's link to "+BaitPath+" at /run/root/key") {
		t.Errorf("harmed %q, want the bait's content changed and the user's link at /run/root/key", harm)
	}
	if w := tg.Writes(); len(w) != 1 || w[0].Path != BaitPath {
		t.Errorf("writes %+v, want one, into the bait (the link followed)", w)
	}

	// Disarmed: transparent again.
	h.Arm()
	n := len(hostileEvents(tg))
	if got := strings.TrimSpace(d.must(`f=$(mktemp /run/svc/.z.XXXX) && chown nobody "$f" && stat -c '%U %F' "$f"`)); got != "nobody regular empty file" {
		t.Errorf("disarmed: the temporary file is %q", got)
	}
	if len(hostileEvents(tg)) != n {
		t.Errorf("disarmed: attacks %+v", hostileEvents(tg)[n:])
	}
}

// PlantDir: the path root moves its file to is a directory of the user's
// by then, and the file lands inside it. LinkDirToRoot: the directory
// root makes with mkdir -p is a link to a directory of root's by then,
// and what root writes below it lands there.
func TestHostilePlantDirAndLinkDirToRoot(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t, WithShell(ShellBash)) // the wrappers and attacks under bash as sh
	d := newDeployer(t, tg)
	h := tg.Hostile(t)
	h.Own("/run/svc")
	h.Own("/nix/var/lib/db")
	if fi, err := os.Stat(tg.Path("/nix/var/lib")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("Own's parent: %v %v, want root's, 0755", fi, err)
	}

	h.Arm(PlantDir)
	d.must(`mkdir -p /run/root && t=$(mktemp /run/root/k.XXXX) && echo s > "$t" && mv "$t" /run/svc/key`)
	harm := h.Harmed()
	if !containsLine(harm, "inside the directory the user planted at /run/svc/key") {
		t.Errorf("PlantDir: harmed %q, want root's file inside the planted /run/svc/key", harm)
	}
	if ev := hostileEvents(tg); len(ev) != 1 || ev[0].Attack != PlantDir || ev[0].Path != "/run/svc/key" || ev[0].Action != "before:mv" {
		t.Errorf("PlantDir: attacks %+v", ev)
	}

	h.Arm(LinkDirToRoot)
	d.must(`mkdir -p /nix/var/lib/db/a/b && echo s > /nix/var/lib/db/a/b/f`)
	harm = h.Harmed()
	bdir := filepath.Dir(BaitPath)
	if !containsLine(harm, bdir+"/b appeared in the bait's directory") {
		t.Errorf("LinkDirToRoot: harmed %q, want %s/b in the bait's directory", harm, bdir)
	}
	if ev := hostileEvents(tg); len(ev) != 2 || ev[1].Attack != LinkDirToRoot || ev[1].Path != "/nix/var/lib/db/a" {
		t.Errorf("LinkDirToRoot: attacks %+v", ev)
	}
}

// Writes: every base64 -d run as root into a regular file, with the
// file's mode and owner as the content went in; not an encode, nor a
// decode into a pipe.
func TestWrites(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t, WithShell(ShellBash)) // the wrappers under bash as sh, as on NixOS
	d := newDeployer(t, tg)
	d.must(`umask 077 && t=$(mktemp /run/.k.XXXXXX) && echo aGkK | base64 -d > "$t" && chmod 0644 "$t" && mv "$t" /run/k1`)
	d.must(`umask 022 && echo aGkK | base64 --decode > /run/k2 && base64 /run/k2 > /run/k3 && echo aGkK | base64 -d | cat > /dev/null`)
	w := tg.Writes()
	if len(w) != 2 {
		t.Fatalf("writes %+v, want 2", w)
	}
	if !strings.HasPrefix(w[0].Path, "/run/.k.") || w[0].Mode != 0o600 || w[0].Owner != "root:root" {
		t.Errorf("the first write %+v, want a temporary file, 0600, root's", w[0])
	}
	if w[1].Path != "/run/k2" || w[1].Mode != 0o644 || w[1].Owner != "root:root" || time.Since(w[1].Time) > time.Minute {
		t.Errorf("the second write %+v, want /run/k2, 0644, root's, now", w[1])
	}
	if got := strings.TrimSpace(d.must("cat /run/k1 /run/k2")); got != "hi\nhi" {
		t.Errorf("what base64 -d wrote: %q", got)
	}
}

// The hostile user's loop swaps the files root writes in the user's
// directory for links to the bait, and starts again after a reboot (the
// user's runtime directory made again).
func TestHostileLoop(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t)
	d := newDeployer(t, tg)
	h := tg.Hostile(t)
	h.Own("/run/svc")
	h.Loop(t, 42)
	d.must(`for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do echo x > /run/svc/f$i; sleep 0.05; done`)
	if !eventually(30*time.Second, func() bool { return len(hostileEvents(tg)) > 0 }) {
		t.Fatal("the loop made no attack")
	}
	for _, e := range hostileEvents(tg) {
		if e.Action != "loop" || !strings.HasPrefix(e.Path, "/run/svc/") {
			t.Errorf("attack %+v, want the loop's, in /run/svc", e)
		}
	}
	tg.SetRebootLinger(0)
	tg.Reboot(200 * time.Millisecond)
	if !eventually(30*time.Second, func() bool { return len(tg.Boots()) == 1 }) || !tg.WaitUp(30*time.Second) {
		t.Fatal("the target did not reboot")
	}
	booted := tg.Boots()[0].Up
	if fi, err := os.Stat(tg.Path("/run/svc")); err != nil || !fi.IsDir() {
		t.Fatalf("/run/svc after the reboot: %v", err)
	}
	d.must(`for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do echo x > /run/svc/g$i; sleep 0.05; done`)
	if !eventually(30*time.Second, func() bool {
		ev := hostileEvents(tg)
		return len(ev) > 0 && ev[len(ev)-1].Time.After(booted)
	}) {
		t.Error("the loop made no attack after the reboot")
	}
}
