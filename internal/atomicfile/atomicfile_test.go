package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/atomicfile"
)

// Write replaces the file's content, leaves no other file behind, makes
// it private, and leaves the old content when it cannot write.
func TestWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "kept.json")
	for _, want := range []string{"first", "second"} {
		if err := atomicfile.Write(path, []byte(want)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Fatalf("after writing %q: %q, %v", want, b, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want 1", len(entries))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if err := atomicfile.Write(filepath.Join(dir, "missing", "x"), []byte("x")); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
}
