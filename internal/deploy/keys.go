package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"regexp"
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
	return agreement.KeyFile{Path: k.Path, User: k.User, Group: k.Group, Mode: k.Mode, Units: k.RestartUnits}
}

// String names k without its content, for logs and messages.
func (k Key) String() string { return fmt.Sprintf("key %s (%s)", k.Name, k.Path) }

// GoString keeps the content out of %#v too.
func (k Key) GoString() string { return k.String() }

// KeyState is what a host has at a key's path.
type KeyState struct {
	Present bool   // a regular file
	Other   bool   // something else: a directory, a link
	Large   bool   // a file larger than a key (agreement.KeyLargest): not read
	Unsafe  string // why the path breaks the rule of a key's path: nothing there was read
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
	case s.Unsafe != "":
		return KeyRefused + s.Unsafe
	case s.Large:
		return "a file larger than a key is at " + k.Path
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

// KeyRefused starts why a key is not in place when its path breaks the
// rule of a key's path: the upload will refuse it too.
const KeyRefused = "refused: "

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

// UnitFault says what is wrong with a unit name a key's restart_units
// holds, or "": systemctl takes a pattern (*, ?, [) for every unit it
// matches, and an option for an option.
func UnitFault(u string) string {
	if !UnitNamePattern.MatchString(u) {
		return fmt.Sprintf("%q is not a systemd unit name (such as postgresql.service): letters, digits and @ . _ : \\ - only, no pattern", u)
	}
	return ""
}

// UnitNamePattern is what a unit name a key's restart_units holds may be.
var UnitNamePattern = regexp.MustCompile(`^[A-Za-z0-9@._:\\-]+$`)

// DestinationFault says what is wrong with a key's destination, or "".
func DestinationFault(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q is not an absolute path: give the file's full path on the host, such as /run/keys/db-password", p)
	case strings.ContainsAny(p, "\n\x00"):
		return "a destination cannot hold a newline"
	case path.Clean(p) == "/nix/store" || strings.HasPrefix(path.Clean(p), "/nix/store/"):
		return fmt.Sprintf("%q lies under /nix/store, which every user of the host can read: put keys under /run/keys (gone at a reboot) or another directory only root can write", p)
	case strings.HasSuffix(p, "/") || path.Clean(p) != p:
		return fmt.Sprintf("%q is not a clean path to a file (write it as %s)", p, path.Clean(p))
	}
	return ""
}

// keyFault says what is wrong with k before any host is asked, or "".
func keyFault(k Key) string {
	if why := DestinationFault(k.Path); why != "" {
		return k.String() + ": " + why
	}
	for _, u := range k.RestartUnits {
		if why := UnitFault(u); why != "" {
			return k.String() + ": restart_units: " + why
		}
	}
	if !ValidMode(k.Mode) {
		return fmt.Sprintf("%s: %q is not a file mode in octal", k, k.Mode)
	}
	return ""
}

// KeysOnHost is what a host has of a node's keys: what is at each key's
// path (States, in the keys' order), the paths the deployment's record on
// the host names as written by it (Recorded), and the units waiting for a
// restart after a key of theirs changed (Restart).
type KeysOnHost struct {
	States   []KeyState
	Recorded []string
	Restart  []string
}

// parseKeysOnHost reads what agreement.KeysQueryScript printed for n
// paths.
func parseKeysOnHost(out string, n int) (KeysOnHost, error) {
	var h KeysOnHost
	ended := false
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "recorded "); ok {
			h.Recorded = append(h.Recorded, rest)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "restart "); ok {
			h.Restart = append(h.Restart, strings.TrimSpace(rest))
			continue
		}
		if rest, ok := strings.CutPrefix(line, "unsafe "); ok {
			h.States = append(h.States, KeyState{Unsafe: rest})
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 1 && f[0] == "end":
			ended = true
		case len(f) == 1 && f[0] == "missing":
			h.States = append(h.States, KeyState{})
		case len(f) == 1 && f[0] == "other":
			h.States = append(h.States, KeyState{Other: true})
		case len(f) == 1 && f[0] == "large":
			h.States = append(h.States, KeyState{Large: true})
		case len(f) == 5 && f[0] == "present":
			h.States = append(h.States, KeyState{Present: true, Digest: f[1], User: f[2], Group: f[3], Mode: f[4]})
		}
	}
	if len(h.States) != n || !ended {
		return KeysOnHost{}, fmt.Errorf("the host's answer about its key files was not understood (%d of %d read)", len(h.States), n)
	}
	return h, nil
}

// keysOnHost asks the host over c what it has of keys (see KeysOnHost).
// What it prints on standard output (the keys' digests) never reaches a
// message: a failure says what ssh or the shell said on standard error.
func keysOnHost(ctx context.Context, c *Conn, deployment string, keys []Key) (KeysOnHost, error) {
	paths := make([]string, len(keys))
	for i, k := range keys {
		paths[i] = k.Path
	}
	stdout, stderr, err := capture(c.Command(ctx, agreement.KeysQueryScript(deployment, paths)), false)
	if err != nil {
		_, msg := exitOf(err, stderr)
		return KeysOnHost{}, &keysQueryError{exit: exitCode(err), msg: msg}
	}
	return parseKeysOnHost(stdout, len(keys))
}

// keysQueryError is a key query that failed: its exit status and what
// ssh or the shell said.
type keysQueryError struct {
	exit int
	msg  string
}

func (e *keysQueryError) Error() string { return "reading its key files: " + orNone(e.msg) }

// exitCode is a command's exit status (1 when it did not run).
func exitCode(err error) int {
	exit, _ := exitOf(err, "")
	return exit
}

// KeyStates asks the host of a session what it has of keys, over the
// session's login.
func (s *Session) KeyStates(ctx context.Context, keys []Key) (KeysOnHost, error) {
	return keysOnHost(ctx, s.conn, s.deployment, keys)
}

// KeyStatesOf logs in to node s and asks what its host has of keys (a
// refresh's or a plan's look, taking no lock).
func (d *Deployer) KeyStatesOf(ctx context.Context, s Settings, keys []Key) (KeysOnHost, error) {
	sess, err := d.OpenSession(ctx, s)
	if err != nil {
		return KeysOnHost{}, err
	}
	defer sess.Close()
	return sess.KeyStates(ctx, keys)
}

// StaleKeys are the paths the deployment's record on a host names that
// none of keys (the node's keys now) is written to: the keys it wrote
// there that were removed or moved since, which the next deploy of the
// node removes.
func StaleKeys(keys []Key, h KeysOnHost) []string {
	var out []string
	for _, p := range h.Recorded {
		if !slices.ContainsFunc(keys, func(k Key) bool { return k.Path == p }) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// keyWork says whether the node has keys to put on its host or to remove.
func (t Target) keyWork() bool { return len(t.Keys) > 0 || len(t.RemovedKeys) > 0 }

// keysFor are the node's keys uploaded at upload (all of them for a
// node whose deploy activates nothing). Goal boot judges nothing: no key
// waits for a verdict there, and after-verdict keys are never uploaded.
func (nr *nodeRun) keysFor(upload KeyUpload) []Key {
	if nr.keysOnly {
		if upload == UploadAfterVerdict {
			return nil
		}
		return nr.n.Keys
	}
	if upload == UploadAfterVerdict && nr.d.Options.Goal == GoalBoot {
		return nil
	}
	var out []Key
	for _, k := range nr.n.Keys {
		if k.Upload == upload || upload == UploadBeforeActivation && k.Upload == "" {
			out = append(out, k)
		}
	}
	return out
}

// keysHeld records what the host said of the node's keys: which are in
// place as configured, and why each other one is not.
type keysHeld struct {
	here map[string]string // key name -> "" in place, else why not
	// under is the lease the host answered under: what it said holds
	// while that lease does (a reboot ends it, and empties /run/keys).
	under *agreement.Lease
}

// seen records the host's answer about keys.
func (kh *keysHeld) seen(keys []Key, states []KeyState) {
	if kh.here == nil {
		kh.here = map[string]string{}
	}
	for i, k := range keys {
		kh.here[k.Name] = k.Why(states[i])
	}
}

// forget says the host's keys are not known any more (a reboot).
func (kh *keysHeld) forget(keys []Key, why string) {
	kh.here, kh.under = map[string]string{}, nil
	for _, k := range keys {
		kh.here[k.Name] = why
	}
}

// putKeys asks the host what it has of the node's keys, then, as the
// action named action (fenced: under the run's lease), writes those of
// keys it lacks or holds otherwise, records those in place that the
// deployment's record lacks, and, with remove, removes the keys the
// deployment wrote on the host that the node no longer has (its record's,
// and those state had: nr.n.RemovedKeys; only what the record names is
// removed). Each key written is noted, with why (nr.wroteKeys), its units
// to restart (nr.wroteUnits, with those the host had waiting), and what
// the host holds (nr.keys).
func (nr *nodeRun) putKeys(ctx context.Context, action string, keys []Key, remove bool) error {
	for _, k := range keys {
		if why := keyFault(k); why != "" {
			return fail(1, "KeyUploadFailed", why, "correct the key in the configuration")
		}
	}
	h, err := keysOnHost(ctx, nr.c, nr.d.Options.Deployment, nr.n.Keys)
	if err != nil {
		return nr.keysFailed(ctx, err)
	}
	nr.keys.seen(nr.n.Keys, h.States)
	nr.keys.under = nr.lock
	for _, u := range h.Restart {
		nr.restartLater(u)
	}
	var writes, adopts []Key
	var whys []string
	for _, k := range keys {
		if why := nr.keys.here[k.Name]; why != "" {
			writes = append(writes, k)
			whys = append(whys, fmt.Sprintf("%s (%s)", k.Name, why))
		} else if !slices.Contains(h.Recorded, k.Path) {
			adopts = append(adopts, k)
		}
	}
	var removes []string
	if remove {
		for _, p := range append(slices.Clone(nr.n.RemovedKeys), StaleKeys(nr.n.Keys, h)...) {
			if !slices.ContainsFunc(nr.n.Keys, func(k Key) bool { return k.Path == p }) && !slices.Contains(removes, p) {
				removes = append(removes, p)
			}
		}
	}
	if len(writes) == 0 && len(adopts) == 0 && len(removes) == 0 {
		return nil
	}
	files := make([]agreement.KeyFile, len(writes))
	for i, k := range writes {
		files[i] = k.File()
	}
	adopted := make([]string, len(adopts))
	for i, k := range adopts {
		adopted[i] = k.Path
	}
	cmd := nr.c.Command(ctx, agreement.KeysScript(nr.run(), action, nr.d.Options.Deployment, files, adopted, removes))
	cmd.Stdin = strings.NewReader(keyInput(writes))
	stdout, stderr, err := capture(cmd, false)
	// What the host says it did stands, however the action ended.
	for _, line := range strings.Split(stdout, "\n") {
		switch {
		case strings.HasPrefix(line, "wrote "):
			i, perr := strconv.Atoi(strings.TrimPrefix(line, "wrote "))
			if perr != nil || i < 0 || i >= len(writes) {
				continue
			}
			nr.keys.here[writes[i].Name] = ""
			nr.wroteKeys = append(nr.wroteKeys, whys[i])
			for _, u := range writes[i].RestartUnits {
				nr.restartLater(u)
			}
		case strings.HasPrefix(line, "removed "):
			nr.removedKeys = append(nr.removedKeys, strings.TrimPrefix(line, "removed "))
		case strings.HasPrefix(line, "kept "):
			nr.keptKeys = append(nr.keptKeys, strings.TrimPrefix(line, "kept "))
			nr.d.note(nr.n.Name, StepKeys, "left on the host: %s", strings.TrimPrefix(line, "kept "))
		}
	}
	if err == nil {
		return nil
	}
	return nr.keysFailed(ctx, err, stderr)
}

// restartLater adds u to the units to restart.
func (nr *nodeRun) restartLater(u string) {
	if u != "" && !slices.Contains(nr.wroteUnits, u) {
		nr.wroteUnits = append(nr.wroteUnits, u)
	}
}

// keysFailed is the failure of a keys action or query that ended with
// err, what its script said on standard error (stderr: never its standard
// output, which holds digests) naming the key at fault.
func (nr *nodeRun) keysFailed(ctx context.Context, err error, stderr ...string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	said := strings.Join(stderr, "")
	exit, msg := exitOf(err, said)
	var qe *keysQueryError
	if errors.As(err, &qe) {
		exit, msg = qe.exit, qe.msg
	}
	if why, ok := fenced(exit, said); ok {
		return leaseLost("to put the node's keys in place", why, "no key was written")
	}
	if exit == 255 {
		return nr.sessionDropped(ctx, "putting the node's keys in place", "each key written is whole (written to a temporary file, then renamed)")
	}
	if _, why, ok := strings.Cut(said, agreement.KeyFailed); ok {
		why, _, _ = strings.Cut(why, "\n")
		keyPath, reason, _ := strings.Cut(strings.TrimSpace(why), ": ")
		what := "key at " + keyPath
		for _, k := range nr.n.Keys {
			if k.Path == keyPath {
				what = k.String()
			}
		}
		return fail(exit, "KeyUploadFailed", what+": "+reason, "fix the host (or the key's destination, user or group), then apply again: the next apply puts the keys in place")
	}
	if qe != nil {
		return fail(exit, "KeyUploadFailed", qe.Error(), "")
	}
	return fail(exit, "KeyUploadFailed", "the keys could not be put on the host: "+orNone(msg), "")
}

// sessionDropped is the failure of a step whose SSH session dropped while
// it did what (an action whose outcome on the host leaves says): the host
// is asked, over a new login, whether it rebooted meanwhile (it lost the
// run's records), which is then what the node failed of.
func (nr *nodeRun) sessionDropped(ctx context.Context, what, leaves string) error {
	actx, cancel := context.WithTimeout(ctx, nr.d.timing().AskFor())
	defer cancel()
	v, err := agreement.Ask(actx, host{nr.c}, nr.run())
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil && v.Lost:
		return nr.hostRebooted("the host rebooted while "+what+"; ", v)
	}
	return fail(255, "ConnectionLost", fmt.Sprintf("the SSH session dropped while %s: %s", what, leaves), "the next apply retries this node")
}

// keysSettled sets the node's KeysUploaded from what the host said of its
// keys (never from what the deploy meant to do): True once every key of
// the node is in place as configured; else False, naming each other one
// and why, unless a step's failure already says why (it stands). What the
// host said under a lease that has ended since (the host may have
// rebooted, and emptied /run/keys) is asked again, within AskFor (at
// once, after an interrupt), or taken as not known.
func (nr *nodeRun) keysSettled(ctx context.Context) {
	if !nr.r.HasKeys || nr.keys.here == nil {
		return
	}
	if nr.keys.under == nil || nr.keys.under != nr.lock || nr.lock.Lost() {
		bound := nr.d.timing().AskFor()
		if ctx.Err() != nil {
			bound = askTimeout
		}
		actx, cancel := context.WithTimeout(context.Background(), bound)
		h, err := keysOnHost(actx, nr.c, nr.d.Options.Deployment, nr.n.Keys)
		cancel()
		if err != nil {
			nr.keys.forget(nr.n.Keys, "not known: the host could not be asked again once the lease its keys were read under had ended")
		} else {
			nr.keys.seen(nr.n.Keys, h.States)
		}
	}
	var missing []string
	for _, k := range nr.n.Keys {
		if why := nr.keys.here[k.Name]; why != "" {
			missing = append(missing, fmt.Sprintf("%s (%s)", k.Name, why))
		}
	}
	if len(missing) == 0 {
		nr.pass(CondKeys, "Uploaded", KeysInPlace)
		return
	}
	if o, ok := nr.r.Outcomes[CondKeys]; ok && !o.Passed {
		return
	}
	nr.r.Outcomes[CondKeys] = Outcome{Reason: "NotInPlace", Message: "not in place on the host: " + strings.Join(missing, "; ")}
}

// restartUnits restarts, fenced as run's action named action, the units
// of the keys the deploy changed (and those the host had waiting): then
// none waits. A failure is noted, and the units keep waiting on the host
// (the next deploy restarts them); it says how it ended.
func (nr *nodeRun) restartUnits(ctx context.Context, action string, step StepName) error {
	if len(nr.wroteUnits) == 0 {
		return nil
	}
	stdout, stderr, err := capture(nr.c.Command(ctx, agreement.RestartScript(nr.run(), action, nr.d.Options.Deployment, nr.wroteUnits)), false)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		exit, msg := exitOf(err, stdout+stderr)
		if why, ok := fenced(exit, stderr); ok {
			return leaseLost("to restart "+strings.Join(nr.wroteUnits, ", "), why, "the keys are in place; the units were not restarted (they wait on the host for the next deploy)")
		}
		nr.d.note(nr.n.Name, step, "restarting %s failed: %s", strings.Join(nr.wroteUnits, ", "), msg)
		return fail(exit, "RestartFailed", fmt.Sprintf("restarting %s failed: %s", strings.Join(nr.wroteUnits, ", "), msg), "see the units' logs on the host (journalctl -u UNIT); they wait on the host, and the next deploy restarts them")
	}
	nr.restarted = append(nr.restarted, nr.wroteUnits...)
	nr.wroteUnits = nil
	return nil
}

// keysDone says what the deploy did of the node's keys, for its message:
// "keys put in place: ...; removed ...; restarted ..."; empty when
// nothing.
func (nr *nodeRun) keysDone() string { return strings.Join(nr.keysSaid(true), "; ") }

// keysSaid is what this deploy did of the node's keys so far: the keys
// written, those removed, those left on the host (kept: only when asked),
// the units restarted.
func (nr *nodeRun) keysSaid(kept bool) []string {
	var parts []string
	if len(nr.wroteKeys) > 0 {
		parts = append(parts, "keys put in place: "+strings.Join(nr.wroteKeys, ", "))
	}
	if len(nr.removedKeys) > 0 {
		parts = append(parts, "keys removed: "+strings.Join(nr.removedKeys, ", "))
	}
	if kept && len(nr.keptKeys) > 0 {
		parts = append(parts, "left on the host: "+strings.Join(nr.keptKeys, "; "))
	}
	if len(nr.restarted) > 0 {
		parts = append(parts, "restarted "+strings.Join(nr.restarted, ", "))
	}
	return parts
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
		if err := nr.holdsLock(ctx); err != nil {
			return err
		}
		err := nr.putKeys(ctx, "keys", nr.keysFor(UploadBeforeActivation), true)
		var f *failure
		if errors.As(err, &f) && f.reason != reasonHostRebooted {
			// The system stands: the units of the keys written restart
			// now (else they wait on the host for the next deploy).
			if rerr := nr.restartUnits(ctx, "restart", StepKeys); rerr != nil && ctx.Err() == nil {
				f.message += "; " + rerr.Error()
			}
			if !nr.keysOnly {
				f.message += "; the new system was not activated: the host runs " + orNone(nr.r.PreviousSystem)
			}
		}
		return err
	},
	leaves: func(nr *nodeRun, during bool) string {
		if !during {
			return "nothing was activated; the host runs " + orNone(nr.r.PreviousSystem)
		}
		return "nothing was activated (the host runs " + orNone(nr.r.PreviousSystem) + "); each key written so far is whole (written to a temporary file, then renamed), the others as they were; the units of the keys written wait on the host for the next deploy to restart them"
	},
}

var keysAfterStep = &step{
	name: StepKeysAfter, does: "putting the node's after-verdict keys in place", cond: CondKeys,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(ctx); err != nil {
			return err
		}
		err := nr.putKeys(ctx, "keys-after", nr.keysFor(UploadAfterVerdict), false)
		if rerr := nr.restartUnits(ctx, "restart-after", StepKeysAfter); err == nil {
			err = rerr
		}
		var f *failure
		if errors.As(err, &f) {
			f.message = "the new system passed its verdict and stays active, but its after-verdict keys are not all in place: " + f.message
			return f
		}
		return err
	},
	leaves: func(nr *nodeRun, during bool) string {
		if !during {
			return "the new system passed its verdict and stays active; its after-verdict keys were not written"
		}
		return "the new system passed its verdict and stays active; its after-verdict keys may not all be in place (each one written is whole)"
	},
}

// restartStep ends a deploy of keys alone: it restarts the units of the
// keys it wrote (restart_units) and of those the host had waiting,
// fenced, and records the node's system as standing.
var restartStep = &step{
	name: StepRestart, does: "restarting the units of the keys that changed", cond: CondKeys,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(ctx); err != nil {
			return err
		}
		if err := nr.restartUnits(ctx, "restart", StepRestart); err != nil {
			var f *failure
			if errors.As(err, &f) && f.reason == "RestartFailed" && len(nr.wroteKeys) > 0 {
				f.message = fmt.Sprintf("the keys are in place (%s), but %s", strings.Join(nr.wroteKeys, ", "), f.message)
			}
			return err
		}
		msg := nr.keysDone()
		if msg == "" {
			msg = "every key was in place already"
		}
		nr.r.Phase, nr.r.Message = PhaseSucceeded, msg+"; the host runs "+orNone(nr.r.CurrentSystem)+", as before"
		return nil
	},
	leaves: func(nr *nodeRun, during bool) string {
		if !during {
			return "the keys are in place; no unit was restarted (they wait on the host for the next deploy)"
		}
		return "the keys are in place; " + strings.Join(nr.wroteUnits, ", ") + " may not all have been restarted (they wait on the host for the next deploy)"
	},
}

// keyUnitsStep restarts, fenced, the units of the keys the deploy changed,
// once the system they run under is the one the host keeps running:
// goal boot's (it changes nothing running), or the booted one's after a
// reboot (put back, its services started without them). A failure is
// noted: the verdict, where one follows, judges the host as it is.
var keyUnitsStep = &step{
	name: StepRestart, does: "restarting the units of the keys that changed", cond: CondKeys,
	run: func(ctx context.Context, nr *nodeRun) error {
		err := nr.restartUnits(ctx, "restart", StepRestart)
		var f *failure
		if errors.As(err, &f) && f.reason == "RestartFailed" {
			return nil // noted; they wait on the host
		}
		return err
	},
	leaves: func(nr *nodeRun, _ bool) string {
		if nr.booted {
			return nr.bootedLeaves()
		}
		return "the keys are in place; " + strings.Join(nr.wroteUnits, ", ") + " may not all have been restarted (they wait on the host for the next deploy)"
	},
}
