package nixos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Build is one nix-store --realise --keep-going of several derivations,
// each waited for on its own: Nix's max-jobs, its remote builders and the
// dependencies the systems share serve them all at once, a derivation's
// waiter goes on as soon as its own build has ended, and one that fails
// fails only its own waiters.
type Build struct {
	outs   map[string]string // derivation -> the output waited for
	mu     sync.Mutex
	ended  map[string]chan struct{}
	errs   map[string]error
	notes  map[string][]string // Nix's error messages, by the derivation they name
	logs   map[string][]string // the last lines of each derivation's build log
	failed map[string]string   // the derivations whose builders failed, with Nix's words
	builds map[uint64]string   // the derivation of each build activity
	cancel context.CancelFunc
	done   chan struct{}
	n      Nix
	err    error // how nix-store ended
	stderr lastWords
	kick   chan struct{} // a build ended somewhere: look at what is valid now
}

// StartBuild starts building outs' derivations (derivation -> its output
// store path) that this machine's store lacks.
func (n Nix) StartBuild(ctx context.Context, outs map[string]string) (*Build, error) {
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b := &Build{outs: outs, ended: map[string]chan struct{}{}, errs: map[string]error{}, notes: map[string][]string{},
		logs: map[string][]string{}, failed: map[string]string{}, builds: map[uint64]string{},
		cancel: cancel, done: make(chan struct{}), n: n, kick: make(chan struct{}, 1)}
	drvs := make([]string, 0, len(outs))
	for drv := range outs {
		b.ended[drv] = make(chan struct{})
		drvs = append(drvs, drv)
	}
	slices.Sort(drvs)
	if len(drvs) == 0 {
		close(b.done)
		return b, nil
	}
	if err := n.Check(ctx); err != nil {
		cancel()
		return nil, err
	}
	cmd := n.command(bctx, "nix-store", append([]string{"--realise", "--keep-going", "--log-format", "internal-json"}, drvs...)...)
	r, w, err := os.Pipe()
	if err != nil {
		cancel()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = io.Discard, w
	if err := cmd.Start(); err != nil {
		cancel()
		_ = r.Close()
		_ = w.Close()
		return nil, err
	}
	_ = w.Close()
	read, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		b.follow(r)
	}()
	go func() {
		defer close(watched)
		b.watch(read)
	}()
	go func() {
		defer close(b.done)
		err := cmd.Wait()
		n.exited(cmd)
		killGroup(cmd)
		<-read
		<-watched
		_ = r.Close()
		b.finish(err)
	}()
	return b, nil
}

// watchEvery is how often a build looks for derivations built since it
// last looked, besides when Nix reports progress.
const watchEvery = 500 * time.Millisecond

// watch settles each derivation whose output has become valid, whenever
// Nix reports a build's progress (kick) and every watchEvery, until the
// log ends: Nix keeps a build's activity open until every build of the
// invocation has ended, so its end says nothing of when one was done.
func (b *Build) watch(read <-chan struct{}) {
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-read:
			return
		case <-b.kick:
		case <-tick.C:
		}
		var outs []string
		byOut := map[string]string{}
		for drv, out := range b.outs {
			if !b.settled(drv) {
				outs, byOut[out] = append(outs, out), drv
			}
		}
		if len(outs) == 0 {
			continue
		}
		stdout, _, err := b.n.output(context.Background(), "nix-store", append([]string{"--check-validity", "--print-invalid"}, outs...)...)
		if err != nil {
			continue
		}
		invalid := map[string]bool{}
		for _, line := range strings.Fields(stdout) {
			invalid[line] = true
		}
		for _, out := range outs {
			if !invalid[out] {
				b.settle(byOut[out], nil)
			}
		}
	}
}

func (b *Build) settled(drv string) bool {
	select {
	case <-b.ended[drv]:
		return true
	default:
		return false
	}
}

// nixLog is one line of Nix's internal-json log.
type nixLog struct {
	Action string `json:"action"`
	ID     uint64 `json:"id"`
	Type   int    `json:"type"`
	Level  int    `json:"level"`
	Msg    string `json:"msg"`
	Fields []any  `json:"fields"`
}

// actBuild is the activity type of a derivation's build, and the result
// type of the builds' progress; resBuildLogLine is the result type of a
// line of a build's log.
const (
	actBuild        = 105
	resBuildLogLine = 101
)

// logTail is how many of a failed build's last log lines its error
// keeps, as many as Nix shows.
const logTail = 10

// follow reads Nix's log: the builds' progress, which makes watch look,
// the errors, kept by the derivation they name, and the last lines of
// each build's log: with a machine-readable log, Nix's error says only
// that the builder failed, the builder's own words are in its log.
func (b *Build) follow(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "@nix ")
		if !ok {
			b.stderr.add(sc.Text())
			continue
		}
		var l nixLog
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch {
		case l.Action == "start" && l.Type == actBuild && len(l.Fields) > 0:
			if drv, ok := l.Fields[0].(string); ok {
				b.mu.Lock()
				b.builds[l.ID] = drv
				b.mu.Unlock()
			}
		case l.Action == "result" && l.Type == resBuildLogLine && len(l.Fields) > 0:
			line, _ := l.Fields[0].(string)
			b.mu.Lock()
			if drv, ok := b.builds[l.ID]; ok {
				b.logs[drv] = append(b.logs[drv], strings.TrimRight(stripColour(line), " \t\r"))
				if n := len(b.logs[drv]); n > logTail {
					b.logs[drv] = b.logs[drv][n-logTail:]
				}
			}
			b.mu.Unlock()
		case l.Action == "result" && l.Type == actBuild, l.Action == "stop":
			select {
			case b.kick <- struct{}{}:
			default:
			}
		case l.Action == "msg" && l.Level <= 1:
			msg := strings.TrimSpace(stripColour(l.Msg))
			b.stderr.add(msg)
			b.mu.Lock()
			for drv := range b.outs {
				if strings.Contains(msg, drv) {
					b.notes[drv] = append(b.notes[drv], msg)
				}
			}
			if m := builderFailed.FindStringSubmatch(msg); m != nil {
				b.failed[m[1]] = m[0]
			}
			b.mu.Unlock()
		}
	}
}

func (b *Build) settle(drv string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := b.ended[drv]
	select {
	case <-ch:
		return
	default:
	}
	b.errs[drv] = err
	close(ch)
}

// finish settles every derivation nix-store ended without settling: built
// when its output is valid (it was already), else failed with what Nix
// said of it.
func (b *Build) finish(err error) {
	b.err = err
	for drv, out := range b.outs {
		if _, _, verr := b.n.output(context.Background(), "nix-store", "--check-validity", out); verr == nil {
			b.settle(drv, nil)
			continue
		}
		b.settle(drv, b.failure(drv, err))
	}
}

// builderFailed is Nix's word that a derivation's builder failed.
var builderFailed = regexp.MustCompile(`builder for '(/nix/store/[^']+\.drv)' failed[^;\n]*`)

// failure is why drv did not build: its own builder's failure, with the
// last lines of its log, or, as usually, the failures of the dependencies
// it needs, each with its own (Nix says only that dependencies failed).
func (b *Build) failure(drv string, err error) *BuildError {
	b.mu.Lock()
	notes := slices.Clone(b.notes[drv])
	failed := maps.Clone(b.failed)
	logs := map[string][]string{}
	for d := range failed {
		logs[d] = b.logs[d]
	}
	b.mu.Unlock()
	var causes []string
	if _, own := failed[drv]; !own && len(failed) > 0 {
		// Which failed builds this one needs: its closure's derivations.
		stdout, _, qerr := b.n.output(context.Background(), "nix-store", "--query", "--requisites", drv)
		if qerr == nil {
			needs := map[string]bool{}
			for _, p := range strings.Fields(stdout) {
				needs[p] = true
			}
			for _, d := range slices.Sorted(maps.Keys(failed)) {
				if needs[d] {
					causes = append(causes, d)
				}
			}
		}
	}
	e := &BuildError{Derivation: drv, Failed: drv}
	if len(causes) == 0 {
		msg := strings.Join(notes, "; ")
		if msg == "" {
			msg = orDefault(b.stderr.String(), fmt.Sprintf("nix-store --realise ended (%v) without building it", err))
		}
		e.Message = msg + logLines(logs[drv]) + "\nits log: " + LogCommand(drv)
		return e
	}
	e.Failed = causes[0]
	parts := make([]string, len(causes))
	for i, d := range causes {
		parts[i] = fmt.Sprintf("%s, which it needs, did not build: %s%s\nits log: %s", DerivationName(d), failed[d], logLines(logs[d]), LogCommand(d))
	}
	e.Message = strings.Join(parts, "\n")
	return e
}

// BuilderFailure reads the output of a plain nix-store --realise (one run
// elsewhere, on a host) for the first builder that failed: the derivation
// and Nix's account of it, with the last lines of its builder's log (the
// nix-store command prints them under its "building '…'" line as they
// come; the nix command below its error, indented). drv is "" when no
// builder failed there.
func BuilderFailure(output string) (drv, account string) {
	lines := strings.Split(stripColour(strings.ReplaceAll(output, "\r", "")), "\n")
	logs := map[string][]string{}
	building := ""
	for i, l := range lines {
		if m := buildingLine.FindStringSubmatch(l); m != nil {
			building = m[1]
			continue
		}
		m := builderFailed.FindStringSubmatch(l)
		if m == nil {
			// A builder's own "error: …" (a compiler's) is its log; Nix's
			// account of the builds that could not go on is not.
			if building != "" && !nixSays.MatchString(l) && strings.TrimSpace(l) != "" {
				logs[building] = append(logs[building], strings.TrimRight(l, " \t"))
			}
			continue
		}
		account = m[0]
		var below []string
		for _, next := range lines[i+1:] {
			if next == "" || (next[0] != ' ' && next[0] != '\t') {
				break
			}
			if t := strings.TrimSpace(next); !strings.HasPrefix(t, "For full logs, run ") {
				// The command Nix names needs nix-command, which a Nix
				// 2.8 without it refuses: the error names LogCommand.
				below = append(below, t)
			}
		}
		if len(below) > 0 {
			return m[1], account + ";\n" + strings.Join(below, "\n")
		}
		log := logs[m[1]]
		if len(log) > logTail {
			log = log[len(log)-logTail:]
		}
		return m[1], account + logLines(log)
	}
	return "", ""
}

// nixSays is Nix's own account, under a build's log lines, of builds that
// could not go on.
var nixSays = regexp.MustCompile(`^error: (build of '|\d+ dependenc(y|ies) of derivation '|cannot build |some substitutes |interrupted by the user)`)

// LogCommand is the command that prints drv's build log, on any Nix (nix
// log needs the nix-command feature, which Nix 2.8 does not enable by
// default).
func LogCommand(drv string) string { return "nix-store -l " + drv }

// buildingLine is the nix-store command's word that a derivation's build
// begins: the lines of its log follow.
var buildingLine = regexp.MustCompile(`^building '(/nix/store/[^']+\.drv)'`)

// logLines are a build's last log lines, as an error shows them.
func logLines(log []string) string {
	if len(log) == 0 {
		return ""
	}
	return "\nlast log lines:\n> " + strings.Join(log, "\n> ")
}

// DerivationName is a derivation's name: app-1.0 of /nix/store/…-app-1.0.drv.
func DerivationName(drv string) string {
	base := strings.TrimSuffix(filepath.Base(drv), ".drv")
	if _, name, ok := strings.Cut(base, "-"); ok {
		return name
	}
	return base
}

func orDefault(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}

// BuildError is a derivation that did not build, with what Nix said.
type BuildError struct {
	Derivation string
	Message    string
	// Failed is the derivation whose builder failed: Derivation itself, or
	// the first of its dependencies that did not build. Its log (LogCommand
	// Failed) says why.
	Failed string
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("the build of %s failed: %s", e.Derivation, e.Message)
}

// Wait waits for drv's build to end, or for ctx, and says how it ended.
func (b *Build) Wait(ctx context.Context, drv string) error {
	ch, ok := b.ended[drv]
	if !ok {
		return fmt.Errorf("%s is not part of this build", drv)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.errs[drv]
}

// Stop interrupts what still builds (Nix stops its builders) and waits
// for nix-store to end.
func (b *Build) Stop() {
	b.cancel()
	<-b.done
}

// lastWords keeps the last few lines a process printed.
type lastWords struct {
	mu    sync.Mutex
	lines []string
}

func (l *lastWords) add(line string) {
	line = strings.TrimSpace(line)
	if line == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	if len(l.lines) > 5 {
		l.lines = l.lines[len(l.lines)-5:]
	}
}

func (l *lastWords) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, " / ")
}

// Pending is what realising derivations would take, as Nix's dry run
// says: the derivations it would build, and the paths it would fetch from
// a configured substituter.
type Pending struct {
	Build []string
	Fetch []string
}

// WillBuild asks Nix what realising drvs would build and fetch
// (nix-store --realise --dry-run): nothing is built.
func (n Nix) WillBuild(ctx context.Context, drvs ...string) (Pending, error) {
	if err := n.Check(ctx); err != nil {
		return Pending{}, err
	}
	_, stderr, err := n.output(ctx, "nix-store", append([]string{"--realise", "--dry-run"}, drvs...)...)
	if err != nil {
		return Pending{}, interrupted(ctx, fmt.Errorf("nix-store --realise --dry-run: %s", errorHead(stderr)))
	}
	return parsePending(stderr), nil
}

// parsePending reads a dry run's lists: the store paths under its "will
// be built" and "will be fetched" lines.
func parsePending(stderr string) Pending {
	var p Pending
	var list *[]string
	for _, line := range strings.Split(stripColour(stderr), "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.Contains(t, "will be built"):
			list = &p.Build
		case strings.Contains(t, "will be fetched"):
			list = &p.Fetch
		case strings.HasPrefix(t, "/nix/store/") && line != t && list != nil:
			*list = append(*list, t)
		default:
			list = nil
		}
	}
	return p
}

// HostBuilds is what realising drv builds in another store (a host's),
// from drv's derivation graph here (nix show-derivation -r) and valid,
// which says which of the outputs it is given that store has: the
// derivations from drv down whose outputs it lacks, not below one whose
// outputs it has (that one is not built again).
func (n Nix) HostBuilds(ctx context.Context, drv string, valid func(outputs []string) (map[string]bool, error)) ([]string, error) {
	if err := n.Check(ctx); err != nil {
		return nil, err
	}
	stdout, stderr, err := n.output(ctx, "nix", "--extra-experimental-features", features, "show-derivation", "-r", "--", drv)
	if err != nil {
		return nil, interrupted(ctx, fmt.Errorf("nix show-derivation %s: %s", drv, errorHead(stderr)))
	}
	var graph map[string]struct {
		Outputs map[string]struct {
			Path string `json:"path"`
		} `json:"outputs"`
		InputDrvs map[string]any `json:"inputDrvs"`
	}
	if err := json.Unmarshal([]byte(stdout), &graph); err != nil {
		return nil, fmt.Errorf("nix show-derivation %s printed no derivations: %w", drv, err)
	}
	var outputs []string
	for _, d := range graph {
		for _, o := range d.Outputs {
			outputs = append(outputs, o.Path)
		}
	}
	slices.Sort(outputs)
	there, err := valid(outputs)
	if err != nil {
		return nil, err
	}
	var builds []string
	seen := map[string]bool{}
	var walk func(string)
	walk = func(d string) {
		if seen[d] {
			return
		}
		seen[d] = true
		complete := true
		for _, o := range graph[d].Outputs {
			complete = complete && there[o.Path]
		}
		if complete {
			return
		}
		builds = append(builds, d)
		for in := range graph[d].InputDrvs {
			walk(in)
		}
	}
	walk(drv)
	slices.Sort(builds)
	return builds, nil
}

// Outputs are the output paths of each of drvs, as its derivation says
// (nix show-derivation): what building it makes.
func (n Nix) Outputs(ctx context.Context, drvs ...string) (map[string][]string, error) {
	if err := n.Check(ctx); err != nil {
		return nil, err
	}
	stdout, stderr, err := n.output(ctx, "nix", append([]string{"--extra-experimental-features", features, "show-derivation", "--"}, drvs...)...)
	if err != nil {
		return nil, interrupted(ctx, fmt.Errorf("nix show-derivation: %s", errorHead(stderr)))
	}
	var shown map[string]struct {
		Outputs map[string]struct {
			Path string `json:"path"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(stdout), &shown); err != nil {
		return nil, fmt.Errorf("nix show-derivation printed no derivations: %w", err)
	}
	out := map[string][]string{}
	for drv, d := range shown {
		for _, o := range d.Outputs {
			out[drv] = append(out[drv], o.Path)
		}
		slices.Sort(out[drv])
	}
	return out, nil
}
