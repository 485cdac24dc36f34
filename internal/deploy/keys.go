package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
)

// KeyUpload is when a key is put on its host, relative to the activation.
type KeyUpload string

const (
	// UploadBeforeActivation: in place before the activation starts, so
	// that a unit the switch starts can read it.
	UploadBeforeActivation KeyUpload = "before-activation"
	// UploadAfterVerdict: only once the new system passed its verdict.
	UploadAfterVerdict KeyUpload = "after-verdict"
)

// CondKeys is the condition of a node's keys: each in place on the host,
// as configured. Only a node with keys has it.
const CondKeys Condition = "KeysUploaded"

// Key is a secret file a node's host gets: where, whose, which mode, and
// its content (held in memory only: it reaches the host over a session's
// standard input, and no log, message or argument list holds it).
type Key struct {
	Name         string
	Path         string
	User, Group  string
	Mode         string // octal, as chmod takes it: "0400"
	Upload       KeyUpload
	RestartUnits []string
	// Content is the key's content; ContentKnown false while it is not
	// known (a plan whose value comes from something opened at apply).
	Content      []byte
	ContentKnown bool
}

// File is where and how k is written.
func (k Key) File() agreement.KeyFile {
	return agreement.KeyFile{Path: k.Path, User: k.User, Group: k.Group, Mode: k.Mode}
}

// String names k without its content, for logs and messages.
func (k Key) String() string { return fmt.Sprintf("key %s (%s)", k.Name, k.Path) }

// GoString keeps the content out of %#v too.
func (k Key) GoString() string { return k.String() }

// KeyState is what a host has at a key's path.
type KeyState struct {
	Present bool   // a regular file
	Other   bool   // something else: a directory, a link
	Digest  string // SHA-256 of its content, hex, computed on the host
	User    string
	Group   string
	Mode    string // octal, as stat prints it: "400"
}

// Why says why the host's file (s) is not k as configured: missing, or
// each way it differs (owned otherwise, of another mode and, when the
// content is known, holding another content); empty when it is in place.
// The content is compared by digest, in memory.
func (k Key) Why(s KeyState) string {
	switch {
	case s.Other:
		return "something other than a file is at " + k.Path
	case !s.Present:
		return "missing on the host"
	}
	var whys []string
	if k.ContentKnown && s.Digest != contentDigest(k.Content) {
		whys = append(whys, "another content on the host")
	}
	if s.User != k.User || s.Group != k.Group {
		whys = append(whys, fmt.Sprintf("owned by %s:%s on the host, not %s:%s", s.User, s.Group, k.User, k.Group))
	}
	if !sameMode(s.Mode, k.Mode) {
		whys = append(whys, fmt.Sprintf("mode %s on the host, not %s", octal(s.Mode), octal(k.Mode)))
	}
	return strings.Join(whys, "; ")
}

// contentDigest is what the host's sha256sum prints of content.
func contentDigest(content []byte) string {
	sum := sha256.Sum256(content)
	return hex.EncodeToString(sum[:])
}

func sameMode(a, b string) bool {
	x, errA := strconv.ParseUint(a, 8, 32)
	y, errB := strconv.ParseUint(b, 8, 32)
	return errA == nil && errB == nil && x == y
}

// octal writes a mode with its leading zero, as configurations do.
func octal(m string) string {
	v, err := strconv.ParseUint(m, 8, 32)
	if err != nil {
		return m
	}
	return fmt.Sprintf("%04o", v)
}

// ValidMode says whether m is a file mode in octal ("0400", "640").
func ValidMode(m string) bool {
	if len(m) < 3 || len(m) > 4 {
		return false
	}
	v, err := strconv.ParseUint(m, 8, 32)
	return err == nil && v <= 0o7777
}

// keyInput is the standard input of a keys action: each key's content,
// base64, a line each, in order.
func keyInput(keys []Key) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k.Content))
		b.WriteByte('\n')
	}
	return b.String()
}

// parseKeyStates reads what agreement.KeysQueryScript printed for n
// paths.
func parseKeyStates(out string, n int) ([]KeyState, error) {
	var states []KeyState
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 1 && f[0] == "missing":
			states = append(states, KeyState{})
		case len(f) == 1 && f[0] == "other":
			states = append(states, KeyState{Other: true})
		case len(f) == 5 && f[0] == "present":
			states = append(states, KeyState{Present: true, Digest: f[1], User: f[2], Group: f[3], Mode: f[4]})
		}
	}
	if len(states) != n {
		return nil, fmt.Errorf("the host's answer about its key files was not understood (%d of %d read)", len(states), n)
	}
	return states, nil
}

// keyStates asks the host over c what it has at each key's path.
func keyStates(ctx context.Context, c *Conn, keys []Key) ([]KeyState, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	paths := make([]string, len(keys))
	for i, k := range keys {
		paths[i] = k.Path
	}
	out, err := output(c.Command(ctx, agreement.KeysQueryScript(paths)))
	if err != nil {
		_, msg := exitOf(err, out)
		return nil, fmt.Errorf("reading its key files: %s", msg)
	}
	return parseKeyStates(out, len(keys))
}

// KeyStates asks the host of a session what it has at each key's path,
// over the session's login.
func (s *Session) KeyStates(ctx context.Context, keys []Key) ([]KeyState, error) {
	return keyStates(ctx, s.conn, keys)
}

// KeyStatesOf logs in to node s and asks what its host has at each key's
// path (a refresh's or a plan's look, taking no lock).
func (d *Deployer) KeyStatesOf(ctx context.Context, s Settings, keys []Key) ([]KeyState, error) {
	sess, err := d.OpenSession(ctx, s)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	return sess.KeyStates(ctx, keys)
}

// keyWork says whether the node has keys to put on its host or to remove.
func (t Target) keyWork() bool { return len(t.Keys) > 0 || len(t.RemovedKeys) > 0 }

// keysFor are the node's keys uploaded at upload (all of them for a
// node whose deploy activates nothing).
func (nr *nodeRun) keysFor(upload KeyUpload) []Key {
	if nr.keysOnly {
		if upload == UploadAfterVerdict {
			return nil
		}
		return nr.n.Keys
	}
	var out []Key
	for _, k := range nr.n.Keys {
		if k.Upload == upload || upload == UploadBeforeActivation && k.Upload == "" {
			out = append(out, k)
		}
	}
	return out
}

// putKeys puts keys on the host where it lacks them or holds them
// otherwise (as the action named action, fenced: under the run's lease),
// and removes removes (paths no key of the node has now), noting each key
// written, with why (nr.wroteKeys), and the units to restart for it.
func (nr *nodeRun) putKeys(ctx context.Context, action string, keys []Key, removes []string) error {
	states, err := keyStates(ctx, nr.c, keys)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fail(1, "KeyUploadFailed", err.Error(), "")
	}
	var writes []Key
	var whys []string
	for i, k := range keys {
		if why := k.Why(states[i]); why != "" {
			writes = append(writes, k)
			whys = append(whys, fmt.Sprintf("%s (%s)", k.Name, why))
		}
	}
	var gone []string
	for _, p := range removes {
		if !slices.ContainsFunc(nr.n.Keys, func(k Key) bool { return k.Path == p }) {
			gone = append(gone, p)
		}
	}
	if len(writes) == 0 && len(gone) == 0 {
		return nil
	}
	files := make([]agreement.KeyFile, len(writes))
	for i, k := range writes {
		files[i] = k.File()
	}
	cmd := nr.c.Command(ctx, agreement.KeysScript(nr.run(), action, files, gone))
	cmd.Stdin = strings.NewReader(keyInput(writes))
	out, err := output(cmd)
	if err == nil {
		nr.wroteKeys = append(nr.wroteKeys, whys...)
		for _, k := range writes {
			for _, u := range k.RestartUnits {
				if !slices.Contains(nr.wroteUnits, u) {
					nr.wroteUnits = append(nr.wroteUnits, u)
				}
			}
		}
		for _, p := range gone {
			nr.wroteKeys = append(nr.wroteKeys, p+" removed")
		}
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	exit, msg := exitOf(err, out)
	if why, ok := fenced(exit, out); ok {
		return leaseLost("to put the node's keys in place", why, "no key was written")
	}
	if _, why, ok := strings.Cut(out, agreement.KeyFailed); ok {
		why, _, _ = strings.Cut(why, "\n")
		path, reason, _ := strings.Cut(strings.TrimSpace(why), ": ")
		what := "key at " + path
		for _, k := range writes {
			if k.Path == path {
				what = k.String()
			}
		}
		return fail(exit, "KeyUploadFailed", what+": "+reason, "fix the host (or the key's destination, user or group), then apply again: the next apply puts the keys in place")
	}
	return fail(exit, "KeyUploadFailed", "the keys could not be put on the host: "+msg, "")
}

// The steps of a node's keys.
const (
	StepKeys      StepName = "keys"
	StepKeysAfter StepName = "keys-after"
	StepRestart   StepName = "restart"
)

var keysStep = &step{
	name: StepKeys, does: "putting the node's keys in place", cond: CondKeys,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(); err != nil {
			return err
		}
		err := nr.putKeys(ctx, "keys", nr.keysFor(UploadBeforeActivation), nr.n.RemovedKeys)
		var f *failure
		if errors.As(err, &f) && !nr.keysOnly {
			f.message += "; the new system was not activated: the host runs " + orNone(nr.r.PreviousSystem)
		}
		if err != nil {
			return err
		}
		if nr.keysOnly || len(nr.keysFor(UploadAfterVerdict)) == 0 {
			nr.pass(CondKeys, "Uploaded", KeysInPlace)
		}
		return nil
	},
	leaves: func(nr *nodeRun, during bool) string {
		if !during {
			return "nothing was activated; the host runs " + orNone(nr.r.PreviousSystem)
		}
		return "nothing was activated (the host runs " + orNone(nr.r.PreviousSystem) + "); each key written so far is whole (written to a temporary file, then renamed), the others as they were"
	},
}

var keysAfterStep = &step{
	name: StepKeysAfter, does: "putting the node's after-verdict keys in place", cond: CondKeys,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(); err != nil {
			return err
		}
		err := nr.putKeys(ctx, "keys-after", nr.keysFor(UploadAfterVerdict), nil)
		var f *failure
		if errors.As(err, &f) {
			f.message = "the new system passed its verdict and stays active, but its after-verdict keys are not all in place: " + f.message
			return f
		}
		if err != nil {
			return err
		}
		nr.pass(CondKeys, "Uploaded", KeysInPlace)
		return nil
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return "the new system passed its verdict and stays active; its after-verdict keys may not all be in place (each one written is whole)"
	},
}

// restartStep ends a deploy of keys alone: it restarts the units of the
// keys it wrote (restart_units), fenced, and records the node's system as
// standing.
var restartStep = &step{
	name: StepRestart, does: "restarting the units of the keys that changed", cond: CondKeys,
	run: func(ctx context.Context, nr *nodeRun) error {
		if len(nr.wroteUnits) > 0 {
			if err := nr.holdsLock(); err != nil {
				return err
			}
			out, err := output(nr.c.Command(ctx, agreement.RestartScript(nr.run(), nr.wroteUnits)))
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				exit, msg := exitOf(err, out)
				if why, ok := fenced(exit, out); ok {
					return leaseLost("to restart "+strings.Join(nr.wroteUnits, ", "), why, "the keys are in place; the units were not restarted")
				}
				return fail(exit, "RestartFailed", fmt.Sprintf("the keys are in place (%s), but restarting %s failed: %s", strings.Join(nr.wroteKeys, ", "), strings.Join(nr.wroteUnits, ", "), msg),
					"see the units' logs on the host (journalctl -u UNIT)")
			}
		}
		msg := "every key was in place already"
		if len(nr.wroteKeys) > 0 {
			msg = "keys put in place: " + strings.Join(nr.wroteKeys, ", ")
		}
		if len(nr.wroteUnits) > 0 {
			msg += "; restarted " + strings.Join(nr.wroteUnits, ", ")
		}
		nr.r.Phase, nr.r.Message = PhaseSucceeded, msg+"; the host runs "+orNone(nr.r.CurrentSystem)+", as before"
		return nil
	},
	leaves: func(nr *nodeRun, during bool) string {
		if !during {
			return "the keys are in place; no unit was restarted"
		}
		return "the keys are in place; " + strings.Join(nr.wroteUnits, ", ") + " may not all have been restarted"
	},
}
