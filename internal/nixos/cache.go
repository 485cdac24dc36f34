package nixos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/fleetops/terraform-provider-fleet/internal/atomicfile"
)

// A flake's evaluation is kept, so that a plan of an unchanged repository
// (a drift job, every hour) does not evaluate it again. The key is what
// Nix itself keys its evaluation cache on: the flake's locked content
// (its narHash, which covers flake.lock and so the inputs), and the
// attribute asked for; with the names, the Nix version and NIX_CONFIG,
// which could change what an evaluation gives. (Nix's own cache serves
// installables only, one per evaluation, not one evaluation of the whole
// fleet.) The flake reference is in the key too: a flake in a directory of
// a git repository (git+file:///repo?dir=prod) locks the whole
// repository's narHash, which another directory's flake shares. A Nix
// file's evaluation is not kept: nothing says what it read.

// cacheVersion changes when what the cache holds does.
const cacheVersion = "fleet-nixos-systems-2"

// cached returns the kept evaluation of src's names, if any and every
// derivation in it is still in the store; key is what to keep a new one
// under ("" when the source is not a flake or cannot be keyed).
func (n Nix) cached(ctx context.Context, src Source, names []string) (systems []System, key string, err error) {
	if n.CacheDir == "" || src.Flake == "" {
		return nil, "", nil
	}
	if err := CheckCacheDir(n.CacheDir); err != nil {
		return nil, "", err
	}
	hash, ok := n.narHash(ctx, src)
	if !ok {
		return nil, "", nil // not keyed: evaluated, not kept
	}
	v, _ := versions.Load(n.bin("nix"))
	version, _ := v.(versionResult)
	sum := sha256.Sum256([]byte(strings.Join([]string{cacheVersion, version.version, hash, src.ref(), src.attribute(),
		strings.Join(names, "\x00"), os.Getenv("NIX_CONFIG"), strings.Join(n.Env, "\x00")}, "\x01")))
	key = hex.EncodeToString(sum[:])
	return n.kept(key), key, nil
}

// flakeMetadata is what nix flake metadata says of a flake: its locked
// content hash, the store path of its source, and where that source is
// on this machine (a path or a local git repository).
type flakeMetadata struct {
	Locked struct {
		NarHash string `json:"narHash"`
	} `json:"locked"`
	Path     string `json:"path"`
	Resolved struct {
		Type string `json:"type"`
		Path string `json:"path"`
		URL  string `json:"url"`
	} `json:"resolved"`
}

func (n Nix) metadata(ctx context.Context, src Source) (flakeMetadata, bool) {
	var meta flakeMetadata
	stdout, _, err := n.output(ctx, "nix", "--extra-experimental-features", features, "flake", "metadata", "--json", "--", src.ref())
	if err != nil || json.Unmarshal([]byte(stdout), &meta) != nil {
		return flakeMetadata{}, false
	}
	return meta, true
}

// narHash is the flake's locked content hash, as nix flake metadata says.
func (n Nix) narHash(ctx context.Context, src Source) (string, bool) {
	meta, ok := n.metadata(ctx, src)
	return meta.Locked.NarHash, ok && meta.Locked.NarHash != ""
}

// localiser rewrites the positions Nix gives in a flake's store copy
// (/nix/store/…-source/configurations.nix:8:9) to the files they were
// copied from, where those are on this machine: a path: flake's
// directory, a local git repository's top. Other positions (an input's,
// a flake fetched from elsewhere) are left as Nix gave them.
func (n Nix) localiser(ctx context.Context, src Source) func(string) string {
	same := func(s string) string { return s }
	if src.Flake == "" {
		return same // a file is evaluated where it is
	}
	meta, ok := n.metadata(ctx, src)
	if !ok || !strings.HasPrefix(meta.Path, "/nix/store/") {
		return same
	}
	var local string
	switch meta.Resolved.Type {
	case "path":
		local = meta.Resolved.Path
	case "git":
		if u, err := url.Parse(meta.Resolved.URL); err == nil && u.Scheme == "file" {
			local = u.Path
		}
	}
	if local == "" {
		return same
	}
	// A relative path: flake ("path:./nixos", as path.module makes it) is
	// relative to the directory Nix ran in, which is this process's.
	local, err := filepath.Abs(local)
	if err != nil {
		return same
	}
	// Positions only (file:line:col): a file the copy lacks (one Git does
	// not track yet) is named as Nix looked for it, in the copy.
	at := regexp.MustCompile(regexp.QuoteMeta(meta.Path) + `/(\S+?:\d+:\d+)`)
	top := filepath.Clean(local) + "/"
	return func(s string) string {
		// The local path is taken as it is: a "$" in it is no group.
		return at.ReplaceAllStringFunc(s, func(m string) string { return top + strings.TrimPrefix(m, meta.Path+"/") })
	}
}

// missingInCopy is Nix's word that a path of a flake's copy in the store
// is not there.
var missingInCopy = regexp.MustCompile(`getting status of '/nix/store/[0-9a-z]{32}-source/([^']*)': No such file or directory`)

// dirError says, of an error that a flake's dir= names a directory its
// copy lacks, where dir= is looked for: Nix names only the store path.
// Other errors (nil too) are returned as they are.
func dirError(src Source, err error) error {
	if err == nil {
		return nil
	}
	m := missingInCopy.FindStringSubmatch(err.Error())
	u, perr := url.Parse(strings.SplitN(src.Flake, "#", 2)[0])
	if m == nil || perr != nil {
		return err
	}
	dir := strings.Trim(u.Query().Get("dir"), "/")
	if dir == "" || !strings.HasPrefix(m[1], dir) {
		return err
	}
	return fmt.Errorf("%w (dir="+dir+" names no directory of the flake's repository"+orEmpty(" at ", u.Path)+
		" as the fetcher copies it: dir is relative to the repository's root, and a git+file flake has only what Git tracks)", err)
}

// kept is the evaluation kept under key, nil when there is none or one of
// its derivations was collected since (evaluating again writes it).
func (n Nix) kept(key string) []System {
	var systems []System
	b, err := os.ReadFile(filepath.Join(n.CacheDir, key+".json"))
	if err != nil || json.Unmarshal(b, &systems) != nil {
		return nil
	}
	for i, s := range systems {
		if !inStore(s.Derivation) {
			return nil
		}
		systems[i].Built = inStore(s.Path)
	}
	return systems
}

// keep writes an evaluation under key, in one step.
func (n Nix) keep(key string, systems []System) error {
	if key == "" {
		return nil
	}
	b, err := json.Marshal(systems)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(n.CacheDir, key+".json"), b)
}

// CheckCacheDir makes dir (0700) when missing and refuses it when it is
// not the user's own or others can write it: what it holds decides which
// systems hosts are switched to.
func CheckCacheDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("the evaluation cache %s cannot be made: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("the evaluation cache %s is not a directory (a %s): remove it, and the next run makes it anew (mode 0700)", dir, fi.Mode().Type())
	case ok && int(st.Uid) != os.Getuid():
		return fmt.Errorf("the evaluation cache %s belongs to another user (uid %d), who could make it name other systems: remove it, and the next run makes it anew (mode 0700)", dir, st.Uid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("the evaluation cache %s can be written by other users (mode %04o), who could make it name other systems: chmod go-w %s", dir, fi.Mode().Perm(), dir)
	}
	return nil
}
