package nixtest

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// A snapshot, and what changed since: added, removed and changed paths,
// saying what changed; never through a link; not /nix/store.
func TestSnapshotDiff(t *testing.T) {
	t.Parallel()
	tg := NewTarget(t)
	root := tg.Path("/run/snap")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(root+"/d", 0o755))
	must(os.WriteFile(root+"/a", []byte("a"), 0o644))
	must(os.WriteFile(root+"/d/b", []byte("b"), 0o600))
	must(os.WriteFile(root+"/same", []byte("same"), 0o600))
	must(os.Symlink("/etc", root+"/l"))
	before := tg.Snapshot("/run/snap", "/run/missing")
	if got := before.Diff(tg.Snapshot("/run/snap")); len(got) != 0 {
		t.Errorf("a snapshot's diff with itself: %q", got)
	}
	if _, ok := before["/run/snap/l/passwd"]; ok {
		t.Error("the snapshot followed a link")
	}
	if st := before["/run/snap/d/b"]; st.Type != "file" || st.Mode != 0o600 || st.Size != 1 || st.SHA256 == "" {
		t.Errorf("/run/snap/d/b: %+v", st)
	}
	must(os.Chmod(root+"/a", 0o600))
	must(os.WriteFile(root+"/d/b", []byte("c"), 0o600))
	must(os.Remove(root + "/l"))
	must(os.Symlink("/nix/var/nixtest-bait/secret", root+"/l"))
	must(os.WriteFile(root+"/new", nil, 0o644))
	must(os.Remove(root + "/same"))
	must(os.Lchown(root+"/d", 65534, 65534))
	got := before.Diff(tg.Snapshot("/run/snap"))
	want := []string{
		"changed /run/snap/a: mode 0644 -> 0600",
		"changed /run/snap/d: owner 0:0 -> 65534:65534",
		"changed /run/snap/d/b: content",
		"changed /run/snap/l: link /etc -> /nix/var/nixtest-bait/secret",
		"added /run/snap/new (file 0644 0:0 0 bytes)",
		"removed /run/snap/same (file 0600 0:0 4 bytes)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	nix := tg.Snapshot("/nix")
	for p := range nix {
		if strings.HasPrefix(p, "/nix/store") {
			t.Fatalf("the snapshot of /nix holds %s", p)
		}
	}
	if _, ok := nix["/nix/var/nix/db"]; !ok {
		t.Error("the snapshot of /nix lacks /nix/var/nix/db")
	}
}
