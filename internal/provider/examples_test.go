package provider_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
)

// Every example is a real configuration that validate accepts, through both
// CLIs, against the built provider.
func TestExamplesValidate(t *testing.T) {
	binary := acctest.ProviderBinary(t)
	var dirs []string
	err := filepath.WalkDir("../../examples", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if matches, _ := filepath.Glob(filepath.Join(path, "*.tf")); d.IsDir() && len(matches) > 0 {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 4 {
		t.Fatalf("found %d example directories (%v): the walk is broken", len(dirs), dirs)
	}
	for _, cli := range acctest.CLIs(t) {
		for _, dir := range dirs {
			t.Run(cli.Name+"/"+filepath.ToSlash(dir[len("../../"):]), func(t *testing.T) {
				s := acctest.NewBinarySession(t, cli, binary)
				tfs, _ := filepath.Glob(filepath.Join(dir, "*.tf"))
				for _, f := range tfs {
					b, err := os.ReadFile(f)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(s.Dir, filepath.Base(f)), b, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				out, stderr, err := s.Try("validate", "-json")
				var result struct {
					Valid       bool                 `json:"valid"`
					Diagnostics []acctest.Diagnostic `json:"diagnostics"`
				}
				if jerr := json.Unmarshal([]byte(out), &result); jerr != nil {
					t.Fatalf("validate -json: %v (%v)\n%s\n%s", jerr, err, out, stderr)
				}
				if !result.Valid {
					t.Fatalf("%s does not validate: %+v", dir, result.Diagnostics)
				}
			})
		}
	}
}
