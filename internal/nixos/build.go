package nixos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
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
		logs: map[string][]string{}, builds: map[uint64]string{},
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
		b.mu.Lock()
		notes, log := b.notes[drv], b.logs[drv]
		b.mu.Unlock()
		msg := strings.Join(notes, "; ")
		if msg == "" {
			msg = orDefault(b.stderr.String(), fmt.Sprintf("nix-store --realise ended (%v) without building it", err))
		}
		if len(log) > 0 {
			msg += "\nlast log lines:\n> " + strings.Join(log, "\n> ")
		}
		b.settle(drv, &BuildError{Derivation: drv, Message: msg})
	}
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
