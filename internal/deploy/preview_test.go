package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// A session reads the node as ReadCurrent does over one login, and a
// preview over it asks the host without logging in again.
func TestSessionPreviewLogsInOnce(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	d := deployer(t, deploy.Options{})
	before := tg.AcceptedConnections()
	sess, err := d.OpenSession(context.Background(), targetOf(tg, "web1", sys).Settings)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Current.System != old || sess.Current.HostKey != keyOf(tg.HostKey) {
		t.Errorf("session read %+v, want %s and the key %s", sess.Current, old, keyOf(tg.HostKey))
	}
	p, err := d.Preview(context.Background(), sess, sys, deploy.PreviewOptions{})
	sess.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := tg.AcceptedConnections() - before; got != 1 {
		t.Errorf("%d logins for a read and a preview, want 1", got)
	}
	if p.Current != old || p.CopyPaths != 1 || p.ClosurePaths != 1 || p.CopyBytes != p.ClosureBytes || p.CopyBytes == 0 {
		t.Errorf("preview %+v: want the one path of %s copied", p, sys)
	}
	if !strings.Contains(p.Text(), "copy 1 store path, ") {
		t.Errorf("preview text:\n%s", p.Text())
	}
	t.Log(p.Text())
}

// A kernel or initrd other than the booted one needs a reboot; a system
// without them cannot say. Units compare by the files they resolve to.
func TestPreviewSaysWhenARebootIsNeeded(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (three systems previewed): make test runs it")
	}
	t.Parallel()
	ok := nixtest.Behaviour{Kind: nixtest.Succeed}
	units := map[string]string{"a.service": "[Service]\nExecStart=/bin/a\n"}
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.System(t, nixtest.SystemSpec{Behaviour: ok, Units: units}))
	d := deployer(t, deploy.Options{})
	for _, c := range []struct {
		name string
		spec nixtest.SystemSpec
		want string
	}{
		{"same kernel", nixtest.SystemSpec{Behaviour: ok, Units: units}, "reboot required: no (kernel and initrd unchanged)\n"},
		{"new kernel", nixtest.SystemSpec{Behaviour: ok, Units: units, Kernel: "6.6.1"}, "reboot required: yes (kernel, initrd, kernel-modules changed;"},
		{"new initrd", nixtest.SystemSpec{Behaviour: ok, Units: units, Initrd: "2"}, "reboot required: yes (initrd changed;"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sys := nixtest.System(t, c.spec)
			sess, err := d.OpenSession(context.Background(), targetOf(tg, "web1", sys).Settings)
			if err != nil {
				t.Fatal(err)
			}
			p, err := d.Preview(context.Background(), sess, sys, deploy.PreviewOptions{})
			sess.Close()
			if err != nil {
				t.Fatal(err)
			}
			if text := p.Text() + "\n"; !strings.Contains(text, c.want) || !strings.Contains(text, "from the unit files; plan_dry_activate asks the new system itself): none change") {
				t.Errorf("preview:\n%s\nwant %q and no unit changed", text, c.want)
			}
		})
	}
}

func TestParseDryActivate(t *testing.T) {
	t.Parallel()
	out := `stopping the following units: ignored.service
would stop the following units: old-cron.service
would NOT stop the following changed units: getty@tty1.service
would activate the configuration...
would restart systemd
would restart the following units: nginx.service, sshd.service
would start the following units: fleet-app.service
would reload the following units: dbus.service
`
	got := deploy.ParseDryActivate(out)
	want := deploy.UnitChanges{Stop: []string{"old-cron.service"}, Restart: []string{"nginx.service", "sshd.service"}, Start: []string{"fleet-app.service"}, Reload: []string{"dbus.service"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParseDryActivate = %+v, want %+v", got, want)
	}
}

func TestSplitName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]string{
		"nginx-1.26.2":               {"nginx", "1.26.2"},
		"python3.12-requests-2.31.0": {"python3.12-requests", "2.31.0"},
		"unit-nginx.service":         {"unit-nginx.service", ""},
		"linux-6.6.1-modules":        {"linux", "6.6.1-modules"},
		"hello":                      {"hello", ""},
	} {
		if p, v := deploy.SplitName(in); p != want[0] || v != want[1] {
			t.Errorf("SplitName(%q) = %q, %q; want %q, %q", in, p, v, want[0], want[1])
		}
	}
}

// A session refused for its host key says which key the host offered and
// which it was held to, as ReadCurrent does, and leaves nothing behind.
func TestSessionRefusesAnotherHostKey(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, sys)
	other := sshtest.NewKey(t).AuthorizedLine() // another host's key
	s := targetOf(tg, "web1", sys).Settings
	s.HostKey, s.SeenHostKey = "", keyOf(other)
	sess, err := deployer(t, deploy.Options{}).OpenSession(context.Background(), s)
	if err == nil {
		sess.Close()
		t.Fatal("the session logged in to a host showing another key")
	}
	if !strings.Contains(err.Error(), "offered "+keyOf(tg.HostKey)) || !strings.Contains(err.Error(), keyOf(other)) {
		t.Errorf("the refusal does not name both keys: %v", err)
	}
}

// A dry activation that hangs is stopped after activation_timeout, on the
// host too, and the preview falls back to the unit files, saying why.
func TestPreviewBoundsTheDryActivation(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out activation_timeout): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	dir := filepath.Join(t.TempDir(), "nixos-system-hangs")
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A sleep of its own: no other test's hang is looked for below.
	hang := fmt.Sprintf("sleep 3603.%09d", time.Now().UnixNano()%1e9)
	script := "#!/bin/sh\n[ \"$1\" = dry-activate ] && exec " + hang + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "bin", "switch-to-configuration"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sys := nixtest.AddToStore(t, dir)
	d := deployer(t, deploy.Options{ActivationTimeout: 2 * time.Second})
	sess, err := d.OpenSession(context.Background(), targetOf(tg, "web1", sys).Settings)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	// Timed from the hang's start on the host (the lock and the copy
	// before it take what a busy machine makes them): it ends by the
	// host's activation_timeout, well before the deployer's own bound
	// on the command (15 s more).
	began := make(chan time.Time, 1)
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			for _, p := range tg.Leftovers() {
				if strings.Contains(p, hang) {
					began <- time.Now()
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	p, err := d.Preview(context.Background(), sess, sys, deploy.PreviewOptions{DryActivate: true})
	ended := time.Now()
	close(stop)
	watch.Wait()
	if err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	select {
	case at := <-began:
		took = ended.Sub(at)
	default:
		t.Fatalf("the dry activation never hung on the host:\n%s", p.Text())
	}
	if took > d.Options.ActivationTimeout+10*time.Second || p.UnitsFrom != "unit files" || !strings.Contains(p.Text(), "did not end within activation_timeout (2s)") {
		t.Errorf("%s after the hang began, units from %q:\n%s", took, p.UnitsFrom, p.Text())
	}
	if out, _ := exec.Command("pgrep", "-f", hang).Output(); len(out) > 0 {
		t.Errorf("the dry activation runs on: pids %s", out)
	}
}

// With DryActivate the units come from the new system's own dry
// activation, after the closure was copied; the host keeps running its
// system.
func TestPreviewDryActivates(t *testing.T) {
	t.Parallel()
	ok := nixtest.Behaviour{Kind: nixtest.Succeed}
	tg := nixtest.NewTarget(t)
	old := nixtest.System(t, nixtest.SystemSpec{Behaviour: ok, Units: map[string]string{"a.service": "1", "b.service": "b"}})
	tg.Boot(t, old)
	sys := nixtest.System(t, nixtest.SystemSpec{Behaviour: ok, Units: map[string]string{"a.service": "2", "c.service": "c"}})
	d := deployer(t, deploy.Options{})
	sess, err := d.OpenSession(context.Background(), targetOf(tg, "web1", sys).Settings)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	p, err := d.Preview(context.Background(), sess, sys, deploy.PreviewOptions{DryActivate: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "units (advisory, from the new system's dry activation): restart a.service; start c.service; stop b.service\n"
	if !strings.Contains(p.Text()+"\n", want) || !tg.HasPath(t, sys) || tg.CurrentSystem() != old {
		t.Errorf("preview:\n%s\nwant %q, the closure copied (%v) and %s still running (%s)", p.Text(), want, tg.HasPath(t, sys), old, tg.CurrentSystem())
	}
}

// A host that runs the system already is said to, with what the apply
// then does.
func TestPreviewOfTheSystemTheHostRuns(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, sys)
	d := deployer(t, deploy.Options{})
	sess, err := d.OpenSession(context.Background(), targetOf(tg, "web1", sys).Settings)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	p, err := d.Preview(context.Background(), sess, sys, deploy.PreviewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if text := p.Text(); !strings.Contains(text, "from the same system, which no deploy of it has judged there: the apply activates it again") || !strings.Contains(text, "copy nothing") {
		t.Errorf("preview:\n%s", text)
	}
}

// A dry activation's answer is kept (Options.DryActivations): the same
// host on the same system asked again about the same new system, as the
// apply's own plan asks seconds after the plan, is answered without
// logging in to dry-activate again; a host whose running system changed
// since, or another new system, is asked again; and a directory others
// can write is not used.
func TestPreviewKeepsADryActivation(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (six previews): make test runs it")
	}
	t.Parallel()
	ok := nixtest.Behaviour{Kind: nixtest.Succeed}
	tg := nixtest.NewTarget(t)
	old := nixtest.System(t, nixtest.SystemSpec{Behaviour: ok, Units: map[string]string{"a.service": "1", "b.service": "b"}})
	other := nixtest.System(t, nixtest.SystemSpec{Behaviour: ok, Units: map[string]string{"a.service": "0"}})
	tg.Boot(t, old)
	sys := nixtest.System(t, nixtest.SystemSpec{Behaviour: ok, Units: map[string]string{"a.service": "2", "c.service": "c"}})
	dir := filepath.Join(t.TempDir(), "dry-activations")
	d := deployer(t, deploy.Options{DryActivations: dir})
	dryRuns := func() int {
		n := 0
		for _, c := range tg.Calls() {
			if strings.HasPrefix(c, "dry-activate ") {
				n++
			}
		}
		return n
	}
	preview := func(system string) string {
		t.Helper()
		sess, err := d.OpenSession(context.Background(), targetOf(tg, "web1", system).Settings)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		p, err := d.Preview(context.Background(), sess, system, deploy.PreviewOptions{DryActivate: true})
		if err != nil {
			t.Fatal(err)
		}
		return p.Text()
	}
	want := "units (advisory, from the new system's dry activation): restart a.service; start c.service; stop b.service\n"
	for i := 1; i <= 3; i++ {
		if text := preview(sys); !strings.Contains(text+"\n", want) || dryRuns() != 1 {
			t.Fatalf("preview %d: %d dry activations, want 1 (the first one's answer kept):\n%s", i, dryRuns(), text)
		}
	}
	// The host runs another system now: the kept answer is not its.
	tg.Boot(t, other)
	if text := preview(sys); dryRuns() != 2 || !strings.Contains(text, "restart a.service; start c.service\n") {
		t.Errorf("after the host changed system: %d dry activations, want 2:\n%s", dryRuns(), text)
	}
	// Another new system is asked about.
	if preview(old); dryRuns() != 3 {
		t.Errorf("another new system: %d dry activations, want 3", dryRuns())
	}
	// A directory others can write could hold any answer: not used.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if preview(old); dryRuns() != 4 {
		t.Errorf("with the directory writable by others: %d dry activations, want 4", dryRuns())
	}
}

// A fleet-wide upgrade, each host to a system of its own, is said once:
// what the switches do, then each node's systems and copy under its name;
// previews of the same systems are one body, and a switch that does
// something else is not alike.
func TestPreviewsOfAFleetWideUpgradeAreSaidTogether(t *testing.T) {
	t.Parallel()
	preview := func(node string) deploy.Preview {
		return deploy.Preview{Node: node, System: "/nix/store/new-" + node, Current: "/nix/store/old-" + node,
			CopyPaths: 3, CopyBytes: 9216, ClosurePaths: 40, ClosureBytes: 1 << 20,
			Packages: []deploy.PackageChange{{Name: "openssl", Old: []string{"3.0.13"}, New: []string{"3.0.15"}}}, PackagesKnown: true,
			Units: deploy.UnitChanges{Restart: []string{"nginx.service"}}, UnitsFrom: "unit files", RebootKnown: true}
	}
	web1, db12 := preview("web1"), preview("db12")
	db12.CopyPaths = 4
	if web1.Alike() != db12.Alike() {
		t.Fatalf("two hosts upgrading openssl are not alike:\n%s\n%s", web1.Body(), db12.Body())
	}
	want := strings.Join([]string{
		"  packages: 1 changed, 0 added, 0 removed; closure +0 B: openssl 3.0.13 → 3.0.15",
		"  units (advisory, from the unit files; plan_dry_activate asks the new system itself): restart nginx.service",
		"  reboot required: no (kernel and initrd unchanged)",
		"  web1  to   /nix/store/new-web1",
		"        from /nix/store/old-web1",
		"        copy 3 store paths, 9.0 KiB (of a 1.0 MiB closure; the rest is already on the host)",
		"  db12  to   /nix/store/new-db12",
		"        from /nix/store/old-db12",
		"        copy 4 store paths, 9.0 KiB (of a 1.0 MiB closure; the rest is already on the host)",
	}, "\n")
	if got := deploy.Together([]deploy.Preview{web1, db12}); got != want {
		t.Errorf("together:\n%s\nwant:\n%s", got, want)
	}
	if got := deploy.Heading([]deploy.Preview{web1, db12}); got != "Nodes web1, db12 will switch" {
		t.Errorf("heading %q", got)
	}
	if got := deploy.Together([]deploy.Preview{web1}); got != web1.Body() {
		t.Errorf("one preview together:\n%s\nwant its body:\n%s", got, web1.Body())
	}
	same := web1
	same.Node = "web2"
	if got := deploy.Together([]deploy.Preview{web1, same}); got != web1.Body() {
		t.Errorf("two previews of the same systems together:\n%s\nwant one body:\n%s", got, web1.Body())
	}
	other := preview("web3")
	other.Units.Restart = []string{"postgresql.service"}
	recorded := preview("web4")
	recorded.Current, recorded.Verified = recorded.System, true
	if got := deploy.Heading([]deploy.Preview{recorded}); got != "Node web4 already runs its system" {
		t.Errorf("heading of a node whose host runs its system: %q", got)
	}
	for _, p := range []deploy.Preview{other, recorded} {
		if p.Alike() == web1.Alike() {
			t.Errorf("%s is alike web1:\n%s", p.Node, p.Body())
		}
	}
}
