package nixos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A fleet's configurations are evaluated by several Nix processes at once
// (workers), each over a share of them: one CPU-bound, single-threaded
// nix eval of a hundred real configurations takes minutes on one core of
// a runner with eight, and holds them all in memory. Each share is a run
// of consecutive names, as Nix sorts them: hosts of one role, whose
// configurations import the same modules, tend to be neighbours, and a
// worker evaluates what its share imports once.
//
// A worker's process reports each configuration as it begins and as it
// is done (traces on its standard error), so that:
//
//   - a configuration that fails is the one that began and did not end:
//     its error is its own, with no second evaluation to find it, and the
//     worker goes on with the rest of its share in a new process;
//   - a process whose resident size passes the memory bound, once it has
//     done one configuration, is replaced by a new one for the rest of its
//     share (as nix-eval-jobs' --max-memory-size does);
//   - a failure that three fresh processes meet at once, on their first
//     configuration, with the same error, is one every configuration
//     shares (a broken module they all import): the configurations not
//     evaluated yet are given it without an evaluation each.

// DefaultMaxMemory is the resident size past which a worker's process is
// replaced, when EvaluateOptions.MaxMemory is not set.
const DefaultMaxMemory = 2 << 30

// sharedAfter is how many fresh processes must fail at once with the same
// error for it to be taken as shared.
const sharedAfter = 3

// traceTag begins the traces of a worker's progress.
const traceTag = "fleet-nixos-systems "

// workers is how many processes evaluate count configurations with opts.
func (o EvaluateOptions) workers(count int) int {
	w := o.Workers
	if w <= 0 {
		w = runtime.NumCPU()
	}
	return max(1, min(w, count))
}

func (o EvaluateOptions) maxMemory() int64 {
	if o.MaxMemory > 0 {
		return o.MaxMemory
	}
	return DefaultMaxMemory
}

// outcome is what the evaluation of each configuration came to.
type outcome struct {
	mu      sync.Mutex
	systems map[string]System
	failed  map[string]string // name → the head of its error
	// firsts are the errors processes failed with on their first
	// configuration, and the configurations they failed on.
	firsts map[string][]string
	shared string // an error taken as every configuration's, once found
	// source is a failure before any configuration began: the source's own,
	// or the configurations' attribute set's.
	source    string
	sourceErr error
}

func (o *outcome) done(s System) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.systems[s.Name] = s
}

// fail records name's failure; first says it was the first configuration
// of a fresh process. It returns whether the failure is now taken as
// shared.
func (o *outcome) fail(name, head string, first bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed[name] = head
	if !first {
		return
	}
	o.firsts[head] = append(o.firsts[head], name)
	if len(o.firsts[head]) >= sharedAfter && o.shared == "" {
		o.shared = head
	}
}

func (o *outcome) sharedFailure() (string, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.shared, o.firsts[o.shared]
}

func (o *outcome) sourceFailed(stderr string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sourceErr == nil {
		o.source, o.sourceErr = stderr, err
	}
}

func (o *outcome) abandoned() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sourceErr != nil
}

// evaluateAll evaluates names in shares, opts' workers at once.
func (n Nix) evaluateAll(ctx context.Context, src Source, names []string, opts EvaluateOptions) *outcome {
	out := &outcome{systems: map[string]System{}, failed: map[string]string{}, firsts: map[string][]string{}}
	w := opts.workers(len(names))
	var wg sync.WaitGroup
	for i := range w {
		share := names[i*len(names)/w : (i+1)*len(names)/w]
		wg.Go(func() { n.work(ctx, src, share, opts.maxMemory(), out) })
	}
	wg.Wait()
	return out
}

// work evaluates share, a process at a time, until every configuration of
// it is done or failed.
func (n Nix) work(ctx context.Context, src Source, share []string, maxMemory int64, out *outcome) {
	for len(share) > 0 && ctx.Err() == nil && !out.abandoned() {
		if head, from := out.sharedFailure(); head != "" {
			for _, name := range share {
				out.fail(name, fmt.Sprintf("%s (not evaluated: configurations %s each failed with it first in a process of their own, so it is taken as a failure every configuration shares)", head, strings.Join(from, ", ")), false)
			}
			return
		}
		p := n.evaluate(ctx, src, share, maxMemory)
		for _, s := range p.done {
			out.done(s)
		}
		share = share[len(p.done):]
		switch {
		case ctx.Err() != nil:
			return
		case p.failed:
			out.fail(share[0], errorHead(p.stderr), len(p.done) == 0)
			share = share[1:]
		case p.err != nil && !p.replaced:
			// It failed before its first configuration began.
			out.sourceFailed(p.stderr, p.err)
			return
		}
	}
}

// process is what one Nix process of a worker did.
type process struct {
	done     []System // in the order begun
	failed   bool     // the configuration after done began and did not end
	replaced bool     // stopped past the memory bound
	stderr   string   // what it printed after the last configuration began (all of it, when none did)
	err      error
}

// evaluate evaluates names in one nix eval, in order, as one would by
// hand: their shared imports are evaluated once, nothing is built. It
// stops at the first configuration that fails, or, once one is done, when
// the process's resident size passes maxMemory.
func (n Nix) evaluate(ctx context.Context, src Source, names []string, maxMemory int64) process {
	args := append([]string{"--extra-experimental-features", features, "eval", "--json", "--apply", progress(names)}, src.args(src.attribute())...)
	cmd := n.command(ctx, "nix", args...)
	cmd.Stdout = io.Discard
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return process{err: err}
	}
	if err := cmd.Start(); err != nil {
		return process{err: err}
	}
	var p process
	var doneCount atomic.Int64 // read by the memory watch
	stop := make(chan struct{})
	watched := make(chan struct{})
	var replaced atomic.Bool
	replace := func() {
		replaced.Store(true)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	go func() {
		defer close(watched)
		watchMemory(cmd.Process.Pid, maxMemory, stop, func() bool { return doneCount.Load() > 0 }, replace)
	}()
	var tail strings.Builder
	begun := false
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		msg, ok := strings.CutPrefix(line, "trace: "+traceTag)
		switch {
		case ok && strings.HasPrefix(msg, "begin "):
			begun = true
			tail.Reset()
		case ok && strings.HasPrefix(msg, "done "):
			var r struct {
				Name string `json:"name"`
				Drv  string `json:"drv"`
				Out  string `json:"out"`
			}
			if json.Unmarshal([]byte(strings.TrimPrefix(msg, "done ")), &r) == nil {
				p.done = append(p.done, System{Name: r.Name, Path: r.Out, Derivation: r.Drv, Built: r.Out != "" && inStore(r.Out)})
				doneCount.Add(1)
				// Looked at as each is done, as well as between.
				if len(p.done) < len(names) && residentSize(cmd.Process.Pid) > maxMemory {
					replace()
				}
			}
			begun = false
			tail.Reset()
		default:
			tail.WriteString(line + "\n")
		}
	}
	p.err = cmd.Wait()
	n.exited(cmd)
	close(stop)
	<-watched
	killGroup(cmd)
	p.stderr = tail.String()
	if p.replaced = replaced.Load(); p.replaced {
		p.err = nil
		return p
	}
	p.failed = p.err != nil && begun && len(p.done) < len(names)
	return p
}

// watchMemory kills the process pid (through kill) once its resident
// size passes maxMemory and it may be replaced (some configuration done),
// until stop closes.
func watchMemory(pid int, maxMemory int64, stop <-chan struct{}, replaceable func() bool, kill func()) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if rss := residentSize(pid); rss > maxMemory && replaceable() {
				kill()
				return
			}
		}
	}
}

// residentSize is process pid's resident set size in bytes (0 when it
// cannot be read, as on a system without /proc).
func residentSize(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// progress is the Nix function that evaluates each of names, in order, to
// the system and derivation of its configuration, saying on standard
// error as each begins and as it is done. Reading drvPath instantiates
// the derivation: its .drv is written to the store, for a later build.
func progress(names []string) string {
	list := make([]string, len(names))
	for i, n := range names {
		list[i] = Literal(n)
	}
	one := `n: builtins.trace "` + traceTag + `begin ${builtins.toJSON n}" ` +
		`(let t = (builtins.getAttr n cs).` + toplevel + `; ` +
		`in builtins.trace "` + traceTag + `done ${builtins.toJSON { name = n; drv = t.drvPath; out = t.outPath; }}" null)`
	return "cs: builtins.foldl' (k: n: builtins.seq ((" + one + ") n) (k + 1)) 0 [ " + strings.Join(list, " ") + " ]"
}
