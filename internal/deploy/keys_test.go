package deploy_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// A key's state on its host, judged against the configuration: what is
// wrong, first, or nothing.
func TestKeyWhy(t *testing.T) {
	t.Parallel()
	k := deploy.Key{Name: "db", Path: "/run/keys/db", User: "postgres", Group: "postgres", Mode: "0440", Content: []byte("pw"), ContentKnown: true}
	// sha256 of "pw"
	const pw = "30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4"
	for _, c := range []struct {
		state deploy.KeyState
		want  string
	}{
		{deploy.KeyState{}, "missing on the host"},
		{deploy.KeyState{Other: true}, "something other than a file is at /run/keys/db"},
		{deploy.KeyState{Present: true, Digest: pw, User: "root", Group: "postgres", Mode: "440"}, "owned by root:postgres on the host, not postgres:postgres"},
		{deploy.KeyState{Present: true, Digest: pw, User: "postgres", Group: "postgres", Mode: "400"}, "mode 0400 on the host, not 0440"},
		{deploy.KeyState{Present: true, Digest: "00", User: "postgres", Group: "postgres", Mode: "440"}, "another content on the host"},
		{deploy.KeyState{Present: true, Digest: pw, User: "postgres", Group: "postgres", Mode: "440"}, ""},
		{deploy.KeyState{Present: true, Digest: "00", User: "root", Group: "root", Mode: "644"}, "another content on the host; owned by root:root on the host, not postgres:postgres; mode 0644 on the host, not 0440"},
	} {
		if got := k.Why(c.state); got != c.want {
			t.Errorf("%+v: %q, want %q", c.state, got, c.want)
		}
	}
	k.ContentKnown = false
	if got := k.Why(deploy.KeyState{Present: true, Digest: "00", User: "postgres", Group: "postgres", Mode: "0440"}); got != "" {
		t.Errorf("a content not known is compared: %q", got)
	}
	for m, ok := range map[string]bool{"0400": true, "640": true, "4755": true, "0800": false, "rw": false, "04000": false, "40": false} {
		if deploy.ValidMode(m) != ok {
			t.Errorf("ValidMode(%q) = %v", m, !ok)
		}
	}
	if s := strings.Join([]string{k.String(), k.GoString()}, " "); strings.Contains(s, "pw") {
		t.Errorf("a key's name holds its content: %s", s)
	}
}

// Keys alone, on a NixOS-like host: every byte of a content that no
// shell line could carry as it is (quotes, newlines, NUL, all 256 byte
// values) reaches the file whole, in a directory the upload makes, with
// the owner and mode configured; the units of the keys written are
// restarted; a second deploy finds them in place and writes and restarts
// nothing; a removed key's file goes.
func TestKeysOnlyReachTheHostWhole(t *testing.T) {
	t.Parallel()
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg := nixtest.NewTarget(t)
	tg.Boot(t, sys)
	var content []byte
	for i := range 256 {
		content = append(content, byte(i))
	}
	content = append(content, []byte("\n'\"$(reboot)`x`\n\n")...)
	d := deployer(t, deploy.Options{})
	n := targetOf(tg, "n1", sys)
	n.KeysOnly = true
	n.Keys = []deploy.Key{
		{Name: "blob", Path: "/run/keys/with space/blob", User: "nobody", Group: "nogroup", Mode: "0640", Content: content, ContentKnown: true, RestartUnits: []string{"app.service"}},
		{Name: "empty", Path: "/run/keys/empty", User: "root", Group: "root", Mode: "0400", Content: []byte{}, ContentKnown: true, RestartUnits: []string{"other.service"}},
	}
	res := d.Deploy(context.Background(), []deploy.Target{n}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "keys put in place: blob (missing on the host), empty (missing on the host)", "restarted app.service, other.service")
	got, err := os.ReadFile(tg.Path("/run/keys/with space/blob"))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("the key on the host differs (%v): %q", err, got)
	}
	fi, err := os.Stat(tg.Path("/run/keys/with space/blob"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 || fi.Mode().Perm() != 0o640 {
		t.Errorf("owner %d:%d mode %o, want 65534:65534 0640", st.Uid, st.Gid, fi.Mode().Perm())
	}
	if left, _ := os.ReadDir(tg.Path("/run/keys/with space")); len(left) != 1 {
		t.Errorf("the key's directory holds %d files, want the key alone (no temporary file left)", len(left))
	}
	if !slices.Equal(tg.Restarts(), []string{"app.service", "other.service"}) || len(tg.Calls()) != 0 {
		t.Errorf("restarts %q, switch-to-configuration calls %q", tg.Restarts(), tg.Calls())
	}

	res = d.Deploy(context.Background(), []deploy.Target{n}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "every key was in place already")
	if len(tg.Restarts()) != 2 {
		t.Errorf("keys in place restarted units again: %q", tg.Restarts())
	}

	n.Keys, n.RemovedKeys = n.Keys[:1], []string{"/run/keys/empty"}
	res = d.Deploy(context.Background(), []deploy.Target{n}, nil)
	wantPhase(t, res[0], deploy.PhaseSucceeded, "keys removed: /run/keys/empty")
	if tg.Exists("/run/keys/empty") || !tg.Exists("/run/keys/with space/blob") {
		t.Errorf("after the removal: empty there %v, blob there %v", tg.Exists("/run/keys/empty"), tg.Exists("/run/keys/with space/blob"))
	}

	// The host's logs of the runs say each key written, recorded and
	// removed, by its path, and never its content.
	logs, _ := filepath.Glob(tg.Path(agreement.StateDir + "/*/" + agreement.LogName))
	var all strings.Builder
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	for _, want := range []string{" wrote key /run/keys/with space/blob\n", " recorded key /run/keys/empty\n", " removed key /run/keys/empty\n", " recorded key-gone /run/keys/empty\n"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the host's logs lack %q:\n%s", strings.TrimSpace(want), all.String())
		}
	}
	if text := all.String(); strings.Contains(text, "reboot)") || strings.Contains(text, base64.StdEncoding.EncodeToString(content)[:40]) {
		t.Errorf("the host's logs hold the key's content:\n%s", text)
	}
}
