// Command testtime runs the test suite package by package and prints where
// the time goes: each package's wall time and the CPU (user and system) of
// its test process and everything it waited for (sshd, the CLIs, Nix), and
// the slowest tests. It is how a change to the suite's speed is measured:
// run it before and after, from clean clones.
//
//	make test-times                                   # the whole suite, as make test runs it
//	go run ./scripts/testtime -short ./...           # the inner loop
//	go run ./scripts/testtime -report bench/out/testtime  # print a saved run again
//
// The test binaries are built first (-c, in parallel) so that a package's
// numbers are its tests', not the compiler's; then up to -p binaries run at
// once, each through go tool test2json, as go test -json runs them. The
// events of each package are kept in -out as <package>.json, with the
// measured numbers in packages.json, so a run can be reported again or
// compared.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

// pkgRun is what one package's run measured.
type pkgRun struct {
	Package string        `json:"package"`
	Dir     string        `json:"dir"`
	Wall    time.Duration `json:"wall_ns"`
	User    time.Duration `json:"user_ns"`
	System  time.Duration `json:"system_ns"`
	Passed  bool          `json:"passed"`
	NoTests bool          `json:"no_tests"`
	// Tests is each top-level test's share of the package's CPU.
	Tests map[string]testCPU `json:"tests,omitempty"`
}

// event is one line of test2json's output.
type event struct {
	Action  string    `json:"Action"`
	Package string    `json:"Package"`
	Test    string    `json:"Test"`
	Elapsed float64   `json:"Elapsed"`
	Time    time.Time `json:"Time"`
	Output  string    `json:"Output"`
}

// testTime is one test's outcome.
type testTime struct {
	Package, Test, Action string
	Elapsed               time.Duration
	CPU                   testCPU
}

func main() {
	var (
		parallel = flag.Int("p", runtime.NumCPU(), "test binaries run at once (go test's -p)")
		atOnce   = flag.Int("parallel", runtime.NumCPU(), "tests of a package run at once (go test's -parallel)")
		race     = flag.Bool("race", true, "build with the race detector, as make test does")
		short    = flag.Bool("short", false, "run with -test.short (make test-short)")
		run      = flag.String("run", "", "only tests matching this pattern (-test.run)")
		timeout  = flag.String("timeout", "40m", "each package's -test.timeout")
		out      = flag.String("out", "bench/out/testtime", "where the events and numbers of this run are kept")
		report   = flag.String("report", "", "print the run saved in this directory instead of running")
		top      = flag.Int("top", 25, "how many of the slowest tests to print")
		alone    = flag.String("alone", "/internal/provider", "packages (import paths ending so, comma-separated) that run after all others, one at a time, as make test runs them")
	)
	flag.Parse()
	if *report != "" {
		runs, tests, err := load(*report)
		if err != nil {
			fail(err)
		}
		// A run saved before run.json was kept has no total.
		var times runTimes
		if b, err := os.ReadFile(filepath.Join(*report, "run.json")); err == nil {
			if err := json.Unmarshal(b, &times); err != nil {
				fail(err)
			}
		}
		if err := writeReport(os.Stdout, runs, tests, times, *top); err != nil {
			fail(err)
		}
		return
	}
	patterns := flag.Args()
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	pkgs, err := list(patterns)
	if err != nil {
		fail(err)
	}
	bin, err := os.MkdirTemp("", "testtime-")
	if err != nil {
		fail(err)
	}
	defer func() { _ = os.RemoveAll(bin) }()

	start := time.Now()
	built, err := build(pkgs, bin, *race, *parallel)
	if err != nil {
		fail(err)
	}
	buildWall := time.Since(start)

	args := []string{"-test.count=1", "-test.timeout=" + *timeout, "-test.paniconexit0", "-test.parallel=" + strconv.Itoa(*atOnce)}
	if *short {
		args = append(args, "-test.short")
	}
	if *run != "" {
		args = append(args, "-test.run="+*run)
	}
	runStart := time.Now()
	runs := make([]pkgRun, len(built))
	runAll := func(which []int, atOnce int) {
		sem := make(chan struct{}, atOnce)
		var wg sync.WaitGroup
		for _, i := range which {
			p := built[i]
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				runs[i], runs[i].Tests = runPackage(p, args, *out)
				state := "ok  "
				if !runs[i].Passed {
					state = "FAIL"
				}
				fmt.Fprintf(os.Stderr, "%s %-50s %8.1fs wall %8.1fs cpu\n", state, p.ImportPath,
					runs[i].Wall.Seconds(), (runs[i].User + runs[i].System).Seconds())
			}()
		}
		wg.Wait()
	}
	var first, last []int
	for i, p := range built {
		if isAlone(p.ImportPath, *alone) {
			last = append(last, i)
		} else {
			first = append(first, i)
		}
	}
	runAll(first, *parallel)
	runAll(last, 1)
	runWall := time.Since(runStart)
	// What /usr/bin/time would say of this whole run: this process and
	// every process it waited for (the compiler, the test binaries and
	// what they waited for).
	self, children := cpuOf(syscall.RUSAGE_SELF), cpuOf(syscall.RUSAGE_CHILDREN)
	whole := cpuTimes{User: self.User + children.User, System: self.System + children.System}

	saved, err := json.MarshalIndent(runs, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(*out, "packages.json"), saved, 0o644)
	}
	if err == nil {
		saved, err = json.Marshal(runTimes{Build: buildWall, Run: runWall, CPU: whole})
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(*out, "run.json"), saved, 0o644)
	}
	if err != nil {
		fail(err)
	}
	_, tests, err := load(*out)
	if err != nil {
		fail(err)
	}
	if err := writeReport(os.Stdout, runs, tests, runTimes{Build: buildWall, Run: runWall, CPU: whole}, *top); err != nil {
		fail(err)
	}
	for _, r := range runs {
		if !r.Passed {
			os.Exit(1)
		}
	}
}

// listed is a package as go list prints it.
type listed struct {
	ImportPath   string
	Dir          string
	TestGoFiles  []string
	XTestGoFiles []string
	binary       string
}

func list(patterns []string) ([]listed, error) {
	cmd := exec.Command("go", append([]string{"list", "-json"}, patterns...)...)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// build compiles each package's test binary; packages without tests get
// none and are reported as such.
func build(pkgs []listed, dir string, race bool, parallel int) ([]listed, error) {
	sem := make(chan struct{}, parallel)
	errs := make([]error, len(pkgs))
	var wg sync.WaitGroup
	for i := range pkgs {
		p := &pkgs[i]
		if len(p.TestGoFiles)+len(p.XTestGoFiles) == 0 {
			continue
		}
		p.binary = filepath.Join(dir, strings.ReplaceAll(p.ImportPath, "/", "_")+".test")
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			args := []string{"test", "-c", "-o", p.binary}
			if race {
				args = append(args, "-race")
			}
			cmd := exec.Command("go", append(args, p.ImportPath)...)
			if b, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("building the tests of %s: %v\n%s", p.ImportPath, err, b)
			}
		}()
	}
	wg.Wait()
	return pkgs, errors.Join(errs...)
}

// runPackage runs one test binary in its package's directory, as go test
// does, its output through go tool test2json, and measures it: the whole
// process, and each top-level test's share of it (the CPU the process and
// what it waited for used while the test ran, split evenly among the
// top-level tests running at that moment).
func runPackage(p listed, args []string, out string) (pkgRun, map[string]testCPU) {
	r := pkgRun{Package: p.ImportPath, Dir: p.Dir}
	file := filepath.Join(out, strings.ReplaceAll(p.ImportPath, "/", "_")+".json")
	if p.binary == "" {
		r.Passed, r.NoTests = true, true
		_ = os.WriteFile(file, nil, 0o644)
		return r, nil
	}
	f, err := os.Create(file)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	cmd := exec.Command(p.binary, append([]string{"-test.v=test2json"}, args...)...)
	cmd.Dir = p.Dir
	conv := exec.Command("go", "tool", "test2json", "-t", "-p", p.ImportPath)
	in, err := conv.StdinPipe()
	if err != nil {
		fail(err)
	}
	cmd.Stdout, cmd.Stderr = in, in
	events, err := conv.StdoutPipe()
	if err != nil {
		fail(err)
	}
	conv.Stderr = os.Stderr
	if err := conv.Start(); err != nil {
		fail(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	shares := watch(events, f, cmd.Process.Pid)
	err = cmd.Wait()
	r.Wall = time.Since(start)
	in.Close()
	cpu := <-shares
	if cerr := conv.Wait(); err == nil {
		err = cerr
	}
	if u, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		// wait4's usage of the test binary counts every process it
		// waited for: sshd, the CLIs, Nix.
		r.User = time.Duration(u.Utime.Nano())
		r.System = time.Duration(u.Stime.Nano())
	}
	r.Passed = err == nil
	return r, cpu
}

// testCPU is a top-level test's share of its package's CPU.
type testCPU struct {
	CPU    time.Duration `json:"cpu_ns"`
	Shared bool          `json:"shared"` // other tests ran beside it for a while
}

// watch copies test2json's events to w and, at each event that starts,
// pauses, resumes or ends a top-level test, reads the test process's CPU
// so far and gives what was used since the last event to the tests that
// were running, in equal parts. The shares come when the events end.
func watch(events io.Reader, w io.Writer, pid int) <-chan map[string]testCPU {
	done := make(chan map[string]testCPU, 1)
	go func() {
		shares := map[string]testCPU{}
		running := map[string]bool{}
		last := processCPU(pid)
		sc := bufio.NewScanner(events)
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = w.Write(append(line, '\n'))
			var e event
			if json.Unmarshal(line, &e) != nil || e.Test == "" || strings.Contains(e.Test, "/") {
				continue
			}
			switch e.Action {
			case "run", "pause", "cont", "pass", "fail", "skip":
			default:
				continue
			}
			now := processCPU(pid)
			if now > last && len(running) > 0 {
				part := (now - last) / time.Duration(len(running))
				for name := range running {
					s := shares[name]
					s.CPU += part
					s.Shared = s.Shared || len(running) > 1
					shares[name] = s
				}
			}
			if now > last {
				last = now
			}
			switch e.Action {
			case "run", "cont":
				running[e.Test] = true
			default:
				delete(running, e.Test)
			}
		}
		_, _ = io.Copy(io.Discard, events)
		done <- shares
	}()
	return done
}

// processCPU is the CPU a live process used, with what it waited for
// (utime, stime, cutime and cstime of /proc/<pid>/stat, in clock ticks of
// 10 ms), or 0 once it is gone.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is the state (field 3); utime is field 14.
	var ticks int64
	for _, f := range fields[11:15] {
		n, _ := strconv.ParseInt(f, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// load reads a saved run: the numbers and every test's outcome.
// runTimes are a run's build and test walls and the whole run's CPU
// (run.json).
type runTimes struct {
	Build, Run time.Duration
	CPU        cpuTimes
}

// cpuTimes are user and system CPU time.
type cpuTimes struct{ User, System time.Duration }

// cpuOf is getrusage(who)'s CPU.
func cpuOf(who int) cpuTimes {
	var u syscall.Rusage
	if err := syscall.Getrusage(who, &u); err != nil {
		return cpuTimes{}
	}
	return cpuTimes{User: time.Duration(u.Utime.Nano()), System: time.Duration(u.Stime.Nano())}
}

// isAlone reports whether the import path ends as one of the
// comma-separated suffixes.
func isAlone(importPath, suffixes string) bool {
	for _, s := range strings.Split(suffixes, ",") {
		if s != "" && strings.HasSuffix(importPath, s) {
			return true
		}
	}
	return false
}

func load(dir string) ([]pkgRun, []testTime, error) {
	b, err := os.ReadFile(filepath.Join(dir, "packages.json"))
	if err != nil {
		return nil, nil, err
	}
	var runs []pkgRun
	if err := json.Unmarshal(b, &runs); err != nil {
		return nil, nil, err
	}
	var tests []testTime
	for _, r := range runs {
		f, err := os.Open(filepath.Join(dir, strings.ReplaceAll(r.Package, "/", "_")+".json"))
		if err != nil {
			return nil, nil, err
		}
		// A top-level test's wall is the time while at least one of its
		// innermost tests (itself when it has no subtests) ran: from a
		// run or cont to a pause or end. A parallel test's own Elapsed
		// would leave out its subtests, which run after its function
		// returned, or count the time they waited for a slot.
		var events []event
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		parents := map[string]bool{}
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" {
				continue
			}
			switch e.Action {
			case "run", "cont", "pause", "pass", "fail", "skip":
				events = append(events, e)
				if i := strings.LastIndex(e.Test, "/"); i > 0 {
					parents[e.Test[:i]] = true
				}
			}
		}
		f.Close()
		running := map[string]int{} // leaves running, by top-level test
		since := map[string]time.Time{}
		wall := map[string]time.Duration{}
		for _, e := range events {
			top, _, _ := strings.Cut(e.Test, "/")
			if !parents[e.Test] {
				switch e.Action {
				case "run", "cont":
					if running[top] == 0 {
						since[top] = e.Time
					}
					running[top]++
				default:
					if running[top] > 0 {
						if running[top]--; running[top] == 0 {
							wall[top] += e.Time.Sub(since[top])
						}
					}
				}
			}
			switch e.Action {
			case "pass", "fail", "skip":
				elapsed := time.Duration(e.Elapsed * float64(time.Second))
				if e.Test == top {
					elapsed = wall[top]
				}
				tests = append(tests, testTime{Package: e.Package, Test: e.Test, Action: e.Action, Elapsed: elapsed, CPU: r.Tests[e.Test]})
			}
		}
	}
	return runs, tests, nil
}

// writeReport writes the package table, the slowest tests and the failures to w.
func writeReport(w io.Writer, runs []pkgRun, tests []testTime, times runTimes, top int) error {
	buildWall, runWall := times.Build, times.Run
	sort.Slice(runs, func(i, j int) bool { return runs[i].Wall > runs[j].Wall })
	var out bytes.Buffer
	var rows strings.Builder
	rows.WriteString("package\twall s\tuser s\tsystem s\tcpu s\ttests\tresult\t\n")
	var user, system time.Duration
	counts := map[string]int{}
	for _, t := range tests {
		if !strings.Contains(t.Test, "/") {
			counts[t.Package]++
		}
	}
	for _, r := range runs {
		if r.NoTests {
			continue
		}
		result := "ok"
		if !r.Passed {
			result = "FAIL"
		}
		user += r.User
		system += r.System
		fmt.Fprintf(&rows, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%s\t\n", path(r.Package),
			r.Wall.Seconds(), r.User.Seconds(), r.System.Seconds(), (r.User + r.System).Seconds(), counts[r.Package], result)
	}
	all := 0
	for _, n := range counts {
		all += n
	}
	wall := ""
	if runWall > 0 {
		wall = fmt.Sprintf("%.1f", runWall.Seconds())
	}
	fmt.Fprintf(&rows, "all\t%s\t%.1f\t%.1f\t%.1f\t%d\t\t\n", wall, user.Seconds(), system.Seconds(), (user + system).Seconds(), all)
	if err := table(&out, rows.String(), tabwriter.AlignRight); err != nil {
		return err
	}
	if runWall > 0 {
		fmt.Fprintf(&out, "\nbuild %.0fs, tests %.0fs, in all %.0fs wall\n", buildWall.Seconds(), runWall.Seconds(), (buildWall + runWall).Seconds())
		if c := times.CPU; c.User+c.System > 0 {
			fmt.Fprintf(&out, "the whole run's CPU, build included (as /usr/bin/time counts it): %.0fs (user %.0fs, system %.0fs)\n",
				(c.User + c.System).Seconds(), c.User.Seconds(), c.System.Seconds())
		}
	}

	var topLevel []testTime
	for _, t := range tests {
		if !strings.Contains(t.Test, "/") {
			topLevel = append(topLevel, t)
		}
	}
	sort.Slice(topLevel, func(i, j int) bool { return topLevel[i].Elapsed > topLevel[j].Elapsed })
	if len(topLevel) > top {
		topLevel = topLevel[:top]
	}
	fmt.Fprintf(&out, "\nthe %d slowest tests: wall (a parallel test's from when it ran), and CPU (* shared evenly with tests running beside it):\n", len(topLevel))
	rows.Reset()
	rows.WriteString("wall s\tcpu s\ttest\tpackage\tresult\n")
	for _, t := range topLevel {
		shared := ""
		if t.CPU.Shared {
			shared = "*"
		}
		fmt.Fprintf(&rows, "%.1f\t%.1f%s\t%s\t%s\t%s\n", t.Elapsed.Seconds(), t.CPU.CPU.Seconds(), shared, t.Test, path(t.Package), t.Action)
	}
	if err := table(&out, rows.String(), 0); err != nil {
		return err
	}
	var failed []string
	for _, t := range tests {
		if t.Action == "fail" {
			failed = append(failed, path(t.Package)+" "+t.Test)
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(&out, "\nfailed:\n  %s\n", strings.Join(failed, "\n  "))
	}
	_, err := w.Write(out.Bytes())
	return err
}

// table aligns rows' tab-separated cells into out.
func table(out *bytes.Buffer, rows string, flags uint) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', flags)
	if _, err := io.WriteString(tw, rows); err != nil {
		return err
	}
	return tw.Flush()
}

func path(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/fleetops/terraform-provider-fleet/")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "testtime:", err)
	os.Exit(2)
}
