package deploy_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Issue 47: keys as safe as the switch. Root never follows what another
// user could have put in a key's path, a record never says a key is in
// place that is not, and only what the deployment wrote is removed.

// keysOnly is a node of tg that puts keys alone on its host.
func keysOnly(tg *nixtest.Target, system string, keys ...deploy.Key) deploy.Target {
	n := targetOf(tg, "n1", system)
	n.KeysOnly, n.Keys = true, keys
	return n
}

func key(name, path string, units ...string) deploy.Key {
	return deploy.Key{Name: name, Path: path, User: "root", Group: "root", Mode: "0400", Content: []byte("secret-" + name), ContentKnown: true, RestartUnits: units}
}

// A directory, a link (to a directory, or to a root-only file) or a FIFO
// at a key's destination fails the node, naming what is there; nothing is
// written into it or through it, and the record says the key is not in
// place.
func TestKeysRefuseWhatIsNotAFileAtTheDestination(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	d := deployer(t, deploy.Options{})
	if err := os.MkdirAll(tg.Path("/run/keys/dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tg.Path("/run/root-only"), []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, what string }{
		{"dir", "a directory is at it"},
		{"link-to-dir", "a link is at it (to /run/keys/dir)"},
		{"link-to-file", "a link is at it (to /run/root-only)"},
		{"link-to-same", "a link is at it (to /run/same)"},
		{"fifo", "a fifo is at it"},
	} {
		p := "/run/keys/" + c.name
		switch c.name {
		case "link-to-dir":
			_ = os.Symlink("/run/keys/dir", tg.Path(p))
		case "link-to-file":
			_ = os.Symlink("/run/root-only", tg.Path(p))
		case "link-to-same":
			// Its content the key's: read through the link, it would
			// pass for the key in place.
			_ = os.WriteFile(tg.Path("/run/same"), []byte("secret-"+c.name), 0o400)
			_ = os.Symlink("/run/same", tg.Path(p))
		case "fifo":
			_ = syscall.Mkfifo(tg.Path(p), 0o600)
		}
		res := d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, key(c.name, p))}, nil)
		wantPhase(t, res[0], deploy.PhaseFailed, "key "+c.name+" ("+p+")", c.what, "nothing was written")
		if o := res[0].Outcomes[deploy.CondKeys]; o.Passed {
			t.Errorf("%s: KeysUploaded passed: %+v", c.name, o)
		}
	}
	if left, _ := os.ReadDir(tg.Path("/run/keys/dir")); len(left) != 0 {
		t.Errorf("the directory at a destination holds %d files: the key went into it", len(left))
	}
	if b, _ := os.ReadFile(tg.Path("/run/root-only")); string(b) != "root's" {
		t.Errorf("a link at a destination was followed: the file it leads to holds %q", b)
	}
	if fi, err := os.Stat(tg.Path("/run/root-only")); err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the file a link leads to was chowned or chmodded: %v %v", fi.Mode(), err)
	}
}

// A key whose directory (or one above it) another user owns, or can
// write, is refused, naming the directory and its owner: that user could
// swap what root writes there. A sticky, root-owned directory (as /tmp) is
// no such directory. A missing directory is made root's, mode 0755, each
// one of them (the guide says so; umask 077 made the upper ones 0700).
func TestKeysRefuseADirectoryAnotherUserCanWrite(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	d := deployer(t, deploy.Options{})
	mk := func(p string, mode os.FileMode, uid int) {
		t.Helper()
		if err := os.MkdirAll(tg.Path(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(tg.Path(p), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(tg.Path(p), uid, 0); err != nil {
			t.Fatal(err)
		}
	}
	mk("/run/svc", 0o755, 65534)                  // a service's own directory
	mk("/run/open", 0o777, 0)                     // anyone's
	mk("/run/group", 0o775, 0)                    // its group's
	_ = os.Chown(tg.Path("/run/group"), 0, 65534) // nogroup
	mk("/run/sticky", os.ModeSticky|0o777, 0)     // as /tmp
	mk("/run/svc/sub", 0o755, 0)                  // root's, under a user's
	// A link of root's, in a directory of root's, to the user's directory.
	if err := os.Symlink("/run/svc", tg.Path("/run/to-svc")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, why string }{
		{"/run/svc/db", "its directory /run/svc is owned by nobody, not root, who could swap what root writes there"},
		{"/run/svc/sub/db", "its directory /run/svc is owned by nobody"},
		{"/run/svc/new/db", "its directory /run/svc is owned by nobody"},
		{"/run/to-svc/db", "its directory /run/svc is owned by nobody"},
		{"/run/open/db", "its directory /run/open can be written by every user (mode 777)"},
		{"/run/group/db", "its directory /run/group can be written by group nogroup (mode 775)"},
	} {
		res := d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, key("db", c.path))}, nil)
		wantPhase(t, res[0], deploy.PhaseFailed, c.why, "nothing was written")
		if tg.Exists(c.path) {
			t.Errorf("%s was written", c.path)
		}
	}
	if tg.Exists("/run/svc/new") {
		t.Errorf("a directory was made in a directory another user owns")
	}
	res := d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, key("db", "/run/sticky/db"), key("deep", "/run/keys/a/b/deep"))}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	for _, p := range []string{"/run/keys/a", "/run/keys/a/b"} {
		fi, err := os.Stat(tg.Path(p))
		if err != nil || fi.Mode().Perm() != 0o755 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s made as %v (%v), want root's, 0755", p, fi.Mode(), err)
		}
	}
}

// A key written by a session killed mid-write leaves its temporary file;
// the next write to that directory removes it. A key that cannot be
// written after another was (a user the host lacks) leaves the first in
// place, and its units are restarted all the same (the system stands);
// the node's KeysUploaded names the one not in place.
func TestKeysPartlyWrittenRestartWhatWasWritten(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	d := deployer(t, deploy.Options{})
	if err := os.MkdirAll(tg.Path("/run/keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tg.Path("/run/keys/.fleet-key.AbC123"), []byte("half a secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := key("good", "/run/keys/good", "good.service")
	bad := key("bad", "/run/keys/bad", "bad.service")
	bad.User = "no-such-user-here"
	res := d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, good, bad)}, nil)
	wantPhase(t, res[0], deploy.PhaseFailed, "the host has no user no-such-user-here")
	if !tg.Exists("/run/keys/good") || tg.Exists("/run/keys/bad") {
		t.Errorf("good there %v, bad there %v", tg.Exists("/run/keys/good"), tg.Exists("/run/keys/bad"))
	}
	if tg.Exists("/run/keys/.fleet-key.AbC123") {
		t.Errorf("a temporary file left by an earlier write is still there")
	}
	if r := tg.Restarts(); !slices.Equal(r, []string{"good.service"}) {
		t.Errorf("restarts %q, want good.service (its key was written) alone", r)
	}
	if o := res[0].Outcomes[deploy.CondKeys]; o.Passed || !strings.Contains(o.Message, "bad") {
		t.Errorf("KeysUploaded %+v, want failed, naming bad", o)
	}
	// Mended: only the key written now restarts its units.
	res = d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, good, key("bad", "/run/keys/bad", "bad.service"))}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "keys put in place: bad (missing on the host)", "restarted bad.service")
	if r := tg.Restarts(); !slices.Equal(r, []string{"good.service", "bad.service"}) {
		t.Errorf("restarts %q, want good.service, then bad.service alone", r)
	}
	if o := res[0].Outcomes[deploy.CondKeys]; !o.Passed {
		t.Errorf("KeysUploaded %+v", o)
	}
}

// The units of a key whose write was cut short after its rename (the
// deploy interrupted before the restart) wait on the host: the next deploy
// of the node restarts them, though it finds the key in place.
func TestKeysUnitsWaitingOnTheHostAreRestarted(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	d := deployer(t, deploy.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	onStep(d, deploy.StepRestart, false, cancel)
	res := d.Deploy(ctx, []deploy.Target{keysOnly(tg, sys, key("db", "/run/keys/db", "db.service"))}, nil)
	cancel()
	if !res[0].Interrupted || !tg.Exists("/run/keys/db") || len(tg.Restarts()) != 0 {
		t.Fatalf("interrupted %v, key there %v, restarts %q: want interrupted after the key, before its restart", res[0].Interrupted, tg.Exists("/run/keys/db"), tg.Restarts())
	}
	res = deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, key("db", "/run/keys/db", "db.service"))}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "restarted db.service")
	if r := tg.Restarts(); !slices.Equal(r, []string{"db.service"}) {
		t.Errorf("restarts %q, want db.service once", r)
	}
}

// Only what the deployment wrote is removed: a key it wrote and no longer
// has goes when the node is next deployed, though nothing told the deploy
// (state forgot it: the node was held when the key was removed); a path
// state names that the host's record does not (someone else's file) is
// left, and said so; another deployment's keys on the same host stand.
func TestKeysRemovedAreOnlyThoseTheDeploymentWrote(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	a := deployer(t, deploy.Options{Deployment: "deployment-a"})
	b := deployer(t, deploy.Options{Deployment: "deployment-b"})
	res := a.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, key("old", "/run/keys/old"), key("kept", "/run/keys/kept"))}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	res = b.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, key("other", "/run/keys/other"))}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	if err := os.WriteFile(tg.Path("/run/keys/someone-elses"), []byte("theirs"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := keysOnly(tg, sys, key("kept", "/run/keys/kept"))
	n.RemovedKeys = []string{"/run/keys/someone-elses"}
	res = a.Deploy(context.Background(), []deploy.Target{n}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "keys removed: /run/keys/old", "left on the host: /run/keys/someone-elses: this deployment's record on the host does not name it")
	for p, want := range map[string]bool{"/run/keys/old": false, "/run/keys/kept": true, "/run/keys/other": true, "/run/keys/someone-elses": true} {
		if tg.Exists(p) != want {
			t.Errorf("%s there: %v, want %v", p, tg.Exists(p), want)
		}
	}
	// The record on the host now names the key kept alone.
	rec, _ := os.ReadFile(tg.Path(agreement.KeyRecord("deployment-a")))
	if strings.TrimSpace(string(rec)) != "/run/keys/kept" {
		t.Errorf("the host's record of deployment-a: %q", rec)
	}
	// Destroyed: every key it wrote goes, the other deployment's stay.
	gone := keysOnly(tg, sys)
	gone.RemovedKeys = []string{"/run/keys/kept"}
	res = a.Deploy(context.Background(), []deploy.Target{gone}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "keys removed: /run/keys/kept")
	if tg.Exists("/run/keys/kept") || !tg.Exists("/run/keys/other") {
		t.Errorf("after the removal: kept there %v, other there %v", tg.Exists("/run/keys/kept"), tg.Exists("/run/keys/other"))
	}
}

// systemctl takes a pattern for every unit it matches: a unit that is not
// a unit's name fails the node before anything is written.
func TestKeysRefuseAUnitPattern(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	res := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, key("db", "/run/keys/db", "*"))}, nil)
	wantPhase(t, res[0], deploy.PhaseFailed, `"*" is not a systemd unit name`)
	if len(tg.Restarts()) != 0 || tg.Exists("/run/keys/db") {
		t.Errorf("restarts %q, key written %v", tg.Restarts(), tg.Exists("/run/keys/db"))
	}
}

// Goal boot judges nothing: an after-verdict key is not put in place.
func TestKeysAfterVerdictWaitForAVerdict(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	n := targetOf(tg, "n1", sys)
	after := key("after", "/run/keys/after")
	after.Upload = deploy.UploadAfterVerdict
	n.Keys = []deploy.Key{key("before", "/run/keys/before", "app.service"), after}
	res := deployer(t, deploy.Options{Goal: deploy.GoalBoot}).Deploy(context.Background(), []deploy.Target{n}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	if tg.Exists("/run/keys/after") || !tg.Exists("/run/keys/before") {
		t.Errorf("goal boot: after-verdict key there %v, before-activation key there %v", tg.Exists("/run/keys/after"), tg.Exists("/run/keys/before"))
	}
	// The running system stands: the units of the key written restart.
	if r := tg.Restarts(); !slices.Equal(r, []string{"app.service"}) {
		t.Errorf("restarts %q, want app.service", r)
	}
	if o := res[0].Outcomes[deploy.CondKeys]; o.Passed || !strings.Contains(o.Message, "after") {
		t.Errorf("KeysUploaded %+v, want not in place, naming after", o)
	}
}

// A key rotated in the same apply as a switch restarts its units once the
// new system runs, before the verdict judges it; after-verdict keys
// restart theirs once written.
func TestKeysRotatedWithASwitchRestartTheirUnits(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	d := deployer(t, deploy.Options{})
	before, after := key("db", "/run/keys/db", "db.service"), key("api", "/run/keys/api", "api.service")
	after.Upload = deploy.UploadAfterVerdict
	res := d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, old, before, after)}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	before.Content, after.Content = []byte("rotated"), []byte("rotated too")
	n := targetOf(tg, "n1", sys)
	n.Keys = []deploy.Key{before, after}
	res = d.Deploy(context.Background(), []deploy.Target{n}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "keys put in place: db (another content on the host), api (another content on the host)", "restarted db.service, api.service")
	if r := tg.Restarts(); !slices.Equal(r, []string{"db.service", "api.service", "db.service", "api.service"}) {
		t.Errorf("restarts %q, want each unit again after the switch", r)
	}
	// The after-verdict key was rotated once the verdict passed: the
	// activation found the one before.
	rotated := sha256.Sum256(after.Content)
	for _, seen := range tg.KeysSeen() {
		if strings.Contains(seen, "/run/keys/api "+hex.EncodeToString(rotated[:])) {
			t.Errorf("the activation found the after-verdict key rotated already: %s", seen)
		}
	}
	var verdictAt, restartAt int
	for i, c := range tg.SystemctlCalls() {
		if strings.HasPrefix(c, "restart") && strings.Contains(c, "db.service") {
			restartAt = i
		}
		if strings.HasPrefix(c, "is-system-running") && verdictAt == 0 {
			verdictAt = i
		}
	}
	if restartAt > verdictAt {
		t.Errorf("db.service restarted after the verdict looked at the host: %q", tg.SystemctlCalls())
	}
}

// What the key query prints (a digest of each key) never reaches a
// node's record: a session dropped after it printed one says what ssh
// said, not what the host printed.
func TestKeysQueryOutputNeverInAMessage(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	first, second := key("first", "/run/keys/first"), key("second", "/run/keys/second")
	for _, k := range []deploy.Key{first, second} {
		if err := os.MkdirAll(tg.Path("/run/keys"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tg.Path(k.Path), k.Content, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	// The host's session ends (killed) as it reads the second key, once
	// it has printed the first one's digest.
	wrapper := filepath.Join(tg.StateDir, "bin", "sha256sum")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nn=$(cat /run/nixtest/sha-calls 2>/dev/null || echo 0); echo $((n+1)) > /run/nixtest/sha-calls\n[ \"$n\" = 0 ] || pkill -KILL -s 0\nexec /usr/bin/sha256sum \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	first.Content = []byte("another")
	res := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, first, second)}, nil)
	if res[0].Phase == deploy.PhaseSucceeded {
		t.Fatalf("the query's session was killed, and the node succeeded: %s", res[0].Message)
	}
	sum := sha256.Sum256([]byte("secret-first"))
	digest := hex.EncodeToString(sum[:])
	all := res[0].Message + res[0].Hint
	for _, o := range res[0].Outcomes {
		all += o.Message
	}
	if strings.Contains(all, digest) || strings.Contains(all, digest[:16]) {
		t.Errorf("a key's digest reached the record: %q", all)
	}
}

// A hostile local user who owns a key's directory (a service's state
// directory) and swaps, plants or links what root is about to use there,
// at the worst moment: the key is refused before root touches anything
// there, naming the directory and its owner, and root never follows the
// user (its bait, a root-only file, is untouched; nothing is written in a
// directory the user planted).
func TestKeysInAHostileUsersDirectoryAreRefused(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	for _, attack := range []nixtest.Attack{nixtest.SwapForLink, nixtest.PlantDir, nixtest.LinkDirToRoot} {
		t.Run(string(attack), func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			tg.Boot(t, sys)
			h := tg.Hostile(t)
			h.Own("/run/svc")
			h.Arm(attack)
			db := key("db", "/run/svc/db")
			db.User = h.User()
			deep := key("deep", "/run/svc/keys/deep")
			for _, k := range []deploy.Key{db, deep} {
				res := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, k)}, nil)
				wantPhase(t, res[0], deploy.PhaseFailed, "its directory /run/svc is owned by "+h.User()+", not root", "nothing was written")
			}
			if harmed := h.Harmed(); len(harmed) > 0 {
				t.Errorf("root followed the hostile user: %q", harmed)
			}
			if w := tg.Writes(); len(w) > 0 {
				t.Errorf("root wrote a key's content: %+v", w)
			}
		})
	}
}

// The content of a key is written, as the host records it (its base64 -d
// as root), to a temporary file beside the destination, never to the
// destination itself, and never while the file is readable by anyone the
// key's owner, group and mode do not name.
func TestKeysContentGoesToATemporaryFileOfTheKeysModeAndOwner(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	db := key("db", "/run/keys/db")
	db.User, db.Group, db.Mode = "nobody", "nogroup", "0440"
	res := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, db)}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	w := tg.Writes()
	if len(w) != 1 {
		t.Fatalf("writes %+v, want one", w)
	}
	if filepath.Dir(w[0].Path) != "/run/keys" || !strings.HasPrefix(filepath.Base(w[0].Path), ".fleet-key.") {
		t.Errorf("the content was written to %s, not a temporary file beside /run/keys/db", w[0].Path)
	}
	if w[0].Mode.Perm() != 0o440 || w[0].Owner != "nobody:nogroup" {
		t.Errorf("the content was written to a file of mode %v, owned by %s; want 0440, nobody:nogroup", w[0].Mode.Perm(), w[0].Owner)
	}
}

// From the independent review of issue 47.

// A key two deployments hold (one wrote it, the other found it in place:
// a resource renamed without a moved block, its create and destroy in one
// apply) stays while either's record names it: one deployment's removal
// never undoes the other's key.
func TestKeysSharedWithAnotherDeploymentStay(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	a := deployer(t, deploy.Options{Deployment: "deployment-a"})
	b := deployer(t, deploy.Options{Deployment: "deployment-b"})
	db := key("db", "/run/keys/db")
	for _, d := range []*deploy.Deployer{a, b} {
		res := d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, db)}, nil)
		wantPhase(t, res[0], deploy.PhaseSucceeded)
	}
	gone := keysOnly(tg, sys)
	gone.RemovedKeys = []string{db.Path}
	res := a.Deploy(context.Background(), []deploy.Target{gone}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "left on the host: /run/keys/db: deployment deployment-b's record on the host names it too")
	if !tg.Exists(db.Path) {
		t.Fatalf("deployment-a removed %s, which deployment-b's record names", db.Path)
	}
	// Once b lets it go too, it goes.
	res = b.Deploy(context.Background(), []deploy.Target{gone}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "keys removed: /run/keys/db")
	if tg.Exists(db.Path) {
		t.Errorf("%s stays after both deployments let it go", db.Path)
	}
}

// A directory of root's that another user can write through a POSIX ACL
// (setfacl -m u:svc:rwx) shows mode 775, group root: it is refused all the
// same, naming the ACL.
func TestKeysRefuseADirectoryAnACLLetsAnotherUserWrite(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	h := tg.Hostile(t)
	if err := os.MkdirAll(tg.Path("/run/acl"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setxattr(tg.Path("/run/acl"), "system.posix_acl_access", posixACL(h.UID()), 0); err != nil {
		t.Fatalf("setting a POSIX ACL on the target's /run (a tmpfs, which takes them): %v", err)
	}
	res := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, key("db", "/run/acl/db"))}, nil)
	wantPhase(t, res[0], deploy.PhaseFailed, "its directory /run/acl has an access control list", "nothing was written")
	if tg.Exists("/run/acl/db") {
		t.Error("the key was written")
	}
}

// posixACL is a system.posix_acl_access value granting uid rwx (the mask
// rwx), the owner rwx, the group and others r-x.
func posixACL(uid int) []byte {
	type entry struct {
		tag, perm uint16
		id        uint32
	}
	const undef = 0xffffffff
	entries := []entry{{0x01, 7, undef}, {0x02, 7, uint32(uid)}, {0x04, 5, undef}, {0x10, 7, undef}, {0x20, 5, undef}}
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// Root reads a key's file before it writes it, within bounds: a file a
// user planted at the key's path in a sticky directory (a terabyte of
// holes) is not read, and the key replaces it at once.
func TestKeysQueryOfAUsersFileIsBounded(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	h := tg.Hostile(t)
	if err := os.MkdirAll(tg.Path("/run/sticky"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tg.Path("/run/sticky"), os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(tg.Path("/run/sticky/db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	_ = os.Chown(tg.Path("/run/sticky/db"), h.UID(), h.UID())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := deployer(t, deploy.Options{}).Deploy(ctx, []deploy.Target{keysOnly(tg, sys, key("db", "/run/sticky/db"))}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "db (a file larger than a key is at /run/sticky/db)")
	if b, _ := os.ReadFile(tg.Path("/run/sticky/db")); string(b) != "secret-db" {
		t.Errorf("the key on the host: %d bytes", len(b))
	}
}

// A directory a user plants at a key's destination in a sticky directory
// between root's check and its rename: the rename refuses it (mv -T),
// nothing goes into it.
func TestKeysNeverMovedIntoADirectoryPlantedAtTheDestination(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	h := tg.Hostile(t)
	if err := os.MkdirAll(tg.Path("/run/sticky"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tg.Path("/run/sticky"), os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	h.Arm(nixtest.PlantDir)
	res := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, key("db", "/run/sticky/db"))}, nil)
	if harmed := h.Harmed(); len(harmed) > 0 {
		t.Errorf("root followed the hostile user: %q", harmed)
	}
	if fi, err := os.Lstat(tg.Path("/run/sticky/db")); err == nil && fi.IsDir() {
		if left, _ := os.ReadDir(tg.Path("/run/sticky/db")); len(left) > 0 {
			t.Errorf("the key went into the directory the user planted at its destination (%d files there)", len(left))
		}
		wantPhase(t, res[0], deploy.PhaseFailed, "key db (/run/sticky/db)")
	}
}

// A write cut short right after its rename (the session killed): the key
// is in place, and its units wait on the host, recorded before the
// rename, so that the next deploy, which finds the key in place,
// restarts them.
func TestKeysUnitsWaitWhenCutShortAfterTheRename(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	wrapper := filepath.Join(tg.StateDir, "bin", "mv")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\n/usr/bin/mv \"$@\"; rc=$?\ncase \"$*\" in *.fleet-key.*) rm -f \"$0\"; pkill -KILL -s 0 ;; esac\nexit $rc\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	db := key("db", "/run/keys/db", "db.service")
	res := deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, db)}, nil)
	if res[0].Phase == deploy.PhaseSucceeded || !tg.Exists(db.Path) || len(tg.Restarts()) != 0 {
		t.Fatalf("cut short after the rename: %s (%s), key there %v, restarts %q", res[0].Phase, res[0].Message, tg.Exists(db.Path), tg.Restarts())
	}
	res = deployer(t, deploy.Options{}).Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, db)}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "restarted db.service")
	if r := tg.Restarts(); !slices.Equal(r, []string{"db.service"}) {
		t.Errorf("restarts %q, want db.service once", r)
	}
}

// A unit whose restart fails keeps waiting on the host: the next deploy
// restarts it.
func TestKeysUnitsWaitWhenTheirRestartFails(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	tg.SetRestartFails(t, "db.service")
	db := key("db", "/run/keys/db", "db.service")
	d := deployer(t, deploy.Options{})
	res := d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, db)}, nil)
	wantPhase(t, res[0], deploy.PhaseFailed, "restarting db.service failed")
	tg.SetRestartFails(t)
	res = d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, db)}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "restarted db.service")
	if r := tg.Restarts(); !slices.Equal(r, []string{"db.service"}) {
		t.Errorf("restarts %q, want db.service once it could", r)
	}
}

// A removal never follows another user's link: a key the deployment wrote
// under a directory that became a user's, which the user turned into a
// link to a directory of root's, is not removed there (the file of root's
// of the same name stays).
func TestKeysRemovalNeverFollowsAUsersLink(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	d := deployer(t, deploy.Options{})
	db := key("db", "/run/svc/sub/db")
	res := d.Deploy(context.Background(), []deploy.Target{keysOnly(tg, sys, db)}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded)
	// The directory becomes a service's: its user links sub to a
	// directory of root's that holds a file of that name.
	h := tg.Hostile(t)
	if err := os.MkdirAll(tg.Path("/run/rootdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tg.Path("/run/rootdir/db"), []byte("root's own"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(tg.Path("/run/svc/sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run/rootdir", tg.Path("/run/svc/sub")); err != nil {
		t.Fatal(err)
	}
	_ = os.Lchown(tg.Path("/run/svc/sub"), h.UID(), h.UID())
	_ = os.Chown(tg.Path("/run/svc"), h.UID(), h.UID())
	gone := keysOnly(tg, sys)
	gone.RemovedKeys = []string{db.Path}
	res = d.Deploy(context.Background(), []deploy.Target{gone}, nil)
	wantPhase(t, res[0], deploy.PhaseFailed, "its directory /run/svc is owned by "+h.User(), "it was not removed")
	if !tg.Exists("/run/rootdir/db") {
		t.Error("the removal followed the user's link and removed root's file")
	}
}

// A lease that ends after the switch, its verdict and its boot entry, before
// the after-verdict keys (the explorer's seed 830006: the link held both
// ways through the boot entry's update, for longer than
// remote_exec_timeout): the record says the new system stands and the keys
// were not written, never that nothing was changed on the host.
func TestKeysAfterVerdictWithTheLeaseLostSayTheSystemStands(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, old)
	n := targetOf(tg, "n1", sys)
	after := key("after", "/run/keys/after")
	after.Upload = deploy.UploadAfterVerdict
	n.Keys = []deploy.Key{after}
	d := deployer(t, deploy.Options{})
	// The lease ends on the host as the boot entry is made: its keeper is
	// killed, and every connection to sshd dropped (the deployer's keeper
	// session sees its end at once); the next step begins 2 s later.
	onStep(d, deploy.StepFinalise, true, func() {
		hostFault(t, tg, hostKillKeeper, 0)
		hostFault(t, tg, hostDropSessions, 0)
		time.Sleep(2 * time.Second)
	})
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseFailed, "the host's deploy lock was lost before the keys-after step", "the new system passed its verdict and stays active")
	if strings.Contains(r.Message, "nothing was changed") || strings.Contains(r.Message, "nothing was activated") {
		t.Errorf("the record says nothing changed, but the host runs the new system: %s", r.Message)
	}
	if r.Step != deploy.StepKeysAfter {
		t.Errorf("failed in step %s, want %s", r.Step, deploy.StepKeysAfter)
	}
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys || tg.Exists("/run/keys/after") {
		t.Errorf("the host runs %s, boots %s, the key there %v; want the new system %s, without the key", tg.CurrentSystem(), tg.BootEntry(), tg.Exists("/run/keys/after"), sys)
	}
}
