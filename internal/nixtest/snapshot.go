package nixtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// snapshotHashLimit is the largest regular file whose content a Snapshot
// hashes; a larger one is compared by its size alone.
const snapshotHashLimit = 1 << 20

// FileState is one path of a Snapshot, as lstat sees it (a link is not
// followed).
type FileState struct {
	Type     string // "file", "dir", "link", "fifo", "socket", "device", "chardev"
	UID, GID int
	Mode     os.FileMode // permission bits, setuid, setgid and sticky
	Size     int64       // a regular file's
	Link     string      // a link's target
	SHA256   string      // a regular file's content, hex, up to 1 MiB; "" past that
}

func (f FileState) String() string {
	s := fmt.Sprintf("%s %#o %d:%d", f.Type, f.Mode, f.UID, f.GID)
	switch f.Type {
	case "file":
		s += fmt.Sprintf(" %d bytes", f.Size)
	case "link":
		s += " -> " + f.Link
	}
	return s
}

// Snapshot is what a target's file system held below some roots, by path
// on the target (see Target.Snapshot).
type Snapshot map[string]FileState

// Snapshot records every path below roots (paths on the target) and the
// roots themselves: type, owner, mode, size, a link's target and a
// regular file's SHA-256 (up to 1 MiB). It never follows a link, and
// skips /nix/store, /proc, /sys and /dev. A missing root is left out.
func (t *Target) Snapshot(roots ...string) Snapshot {
	s := Snapshot{}
	prefix := t.Path("")
	for _, root := range roots {
		if !filepath.IsAbs(root) {
			t.tb.Fatalf("nixtest: Snapshot(%q): want an absolute path on the target", root)
		}
		err := filepath.WalkDir(t.Path(filepath.Clean(root)), func(p string, e fs.DirEntry, err error) error {
			path := strings.TrimPrefix(p, prefix)
			if path == "" {
				path = "/"
			}
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // gone meanwhile, or a missing root
				}
				return err
			}
			if skipped(path) {
				if e.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			fi, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			st, err := fileState(p, fi)
			if err != nil {
				return err
			}
			s[path] = st
			return nil
		})
		if err != nil {
			t.tb.Fatalf("nixtest: Snapshot(%q): %v", root, err)
		}
	}
	return s
}

func skipped(path string) bool {
	for _, dir := range []string{"/nix/store", "/proc", "/sys", "/dev"} {
		if path == dir || strings.HasPrefix(path, dir+"/") {
			return true
		}
	}
	return false
}

func fileState(p string, fi os.FileInfo) (FileState, error) {
	f := FileState{Mode: fi.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		f.UID, f.GID = int(st.Uid), int(st.Gid)
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		f.Type, f.Size = "file", fi.Size()
		if f.Size <= snapshotHashLimit {
			h, err := hashFile(p)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return f, err
			}
			f.SHA256 = h
		}
	case m.IsDir():
		f.Type = "dir"
	case m&os.ModeSymlink != 0:
		f.Type = "link"
		l, err := os.Readlink(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
		f.Link = l
	case m&os.ModeNamedPipe != 0:
		f.Type = "fifo"
	case m&os.ModeSocket != 0:
		f.Type = "socket"
	case m&os.ModeCharDevice != 0:
		f.Type = "chardev"
	default:
		f.Type = "device"
	}
	return f, nil
}

func hashFile(p string) (string, error) {
	// O_NOFOLLOW: the path was a regular file as it was listed; a link
	// put there since is not followed.
	fd, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer fd.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(fd, snapshotHashLimit+1)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Diff says, a line per path in order, what after holds that s did not:
// "added PATH (STATE)", "removed PATH (STATE)", or "changed PATH: ..."
// naming each of its type, mode, owner, size, link target and content
// that changed.
func (s Snapshot) Diff(after Snapshot) []string {
	var paths []string
	for p := range s {
		paths = append(paths, p)
	}
	for p := range after {
		if _, ok := s[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var out []string
	for _, p := range paths {
		a, inA := s[p]
		b, inB := after[p]
		switch {
		case !inA:
			out = append(out, fmt.Sprintf("added %s (%s)", p, b))
		case !inB:
			out = append(out, fmt.Sprintf("removed %s (%s)", p, a))
		case a != b:
			out = append(out, fmt.Sprintf("changed %s: %s", p, strings.Join(changes(a, b), ", ")))
		}
	}
	return out
}

func changes(a, b FileState) []string {
	var c []string
	if a.Type != b.Type {
		return []string{fmt.Sprintf("%s -> %s", a, b)}
	}
	if a.Mode != b.Mode {
		c = append(c, fmt.Sprintf("mode %#o -> %#o", a.Mode, b.Mode))
	}
	if a.UID != b.UID || a.GID != b.GID {
		c = append(c, fmt.Sprintf("owner %d:%d -> %d:%d", a.UID, a.GID, b.UID, b.GID))
	}
	if a.Size != b.Size {
		c = append(c, fmt.Sprintf("size %d -> %d", a.Size, b.Size))
	}
	if a.Link != b.Link {
		c = append(c, fmt.Sprintf("link %s -> %s", a.Link, b.Link))
	}
	if a.SHA256 != b.SHA256 {
		c = append(c, "content")
	}
	return c
}
