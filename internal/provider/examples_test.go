package provider_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
)

// Every example is a real configuration that validate accepts, through both
// CLIs, against the built provider.
func TestExamplesValidate(t *testing.T) {
	t.Parallel()
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
				t.Parallel()
				s := acctest.NewBinarySession(t, cli, binary)
				// The whole directory, local modules included; `get`
				// installs those without asking any registry.
				if err := os.CopyFS(s.Dir, os.DirFS(dir)); err != nil {
					t.Fatal(err)
				}
				s.Run("get")
				if valid, diags := s.Validate(); !valid {
					t.Fatalf("%s does not validate: %+v", dir, diags)
				}
			})
		}
	}
}

// Every configuration the docs show is an example file, which
// TestExamplesValidate validates: no snippet in docs/ is written by hand.
func TestDocsShowOnlyExamples(t *testing.T) {
	t.Parallel()
	examples := map[string]bool{}
	err := filepath.WalkDir("../../examples", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".tf") {
			b, rerr := os.ReadFile(path)
			if rerr != nil {
				return rerr
			}
			examples[strings.TrimSpace(string(b))] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```(terraform|hcl|tf)\n(.*?)```")
	shown := 0
	err = filepath.WalkDir("../../docs", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range block.FindAllStringSubmatch(string(b), -1) {
			shown++
			if !examples[strings.TrimSpace(m[2])] {
				t.Errorf("%s shows a configuration that is not an example file (put it in examples/ and include it with tffile):\n%s", path, m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if shown < 5 {
		t.Fatalf("found %d configurations in docs/: the pattern is broken", shown)
	}
}
