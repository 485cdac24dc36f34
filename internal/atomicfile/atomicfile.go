// Package atomicfile replaces a file in one step, so that a reader sees
// the old content or the new, never part of it: the provider's kept
// answers (evaluations, dry activations) are read by other runs at any
// moment.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to a new file (mode 0600) beside path and renames it
// to path; on failure the new file is removed and path is left as it was.
func Write(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".new-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}
