// Command mutate-agreement measures the host agreement explorer's teeth
// (make mutate-agreement): it applies each safety mutation of the
// agreement alone, in a worktree of HEAD, runs the explorer there on fresh
// schedules only (FLEET_EXPLORE_FRESH_ONLY=1: no regression seed), and
// prints for each mutation how many of the schedules broke an invariant
// and the first seed that did. A mutation no schedule catches is a hole
// in the explorer.
//
//	go run ./scripts/mutate-agreement [-schedules 50] [-run name,...]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// mutation is one change to the code, an exact text replaced once.
type mutation struct {
	name, file, old, new string
}

// mutations are the agreement's safety mutations: the review's five, the
// three bugs of issue 37 (the retried activation's two halves, the
// activation's fence), and one of each clock: the deployer's patience
// (HostGivesUp), the watchdog's (confirm_timeout), the keeper's (a
// lease's end), a spare's wait (SpareAfter) and the words' pace
// (WordEvery); and issue 39's two: a host that rebooted (its records of a
// run gone with /run) taken for one where the run never started, and a
// deploy's reboot not fenced.
var mutations = []mutation{
	{"the fence's lease check removed", "internal/agreement/scripts/fence.sh",
		`[ "$fleet_t" = "$1" ] || { echo "{{.FencedMarker}}another deployment's lease holds the host's deploy lock: this deployer's had ended" >&2; exit {{.FencedExit}}; }`,
		`:`},
	{"a new lease does not wait for the earlier run's actors (the guard)", "internal/agreement/scripts/take.sh",
		"until flock -n 8; do", "until true; do"},
	{"the host never ends a silent lease", "internal/agreement/scripts/take.sh",
		"[ $fleet_m -lt {{.LeaseMisses}} ] || { kill -TERM $fleet_me; exit 0; }", "[ $fleet_m -lt {{.LeaseMisses}} ] || :"},
	{"a confirmation the watchdog had refused recorded Succeeded", "internal/deploy/steps.go",
		"case err == nil && decision == agreement.DecisionConfirm:",
		"case err == nil && (decision == agreement.DecisionConfirm || decision == agreement.DecisionRollback):"},
	{"a lost confirmation's answer recorded RolledBack without asking", "internal/deploy/steps.go",
		"\to, err := nr.settle(ctx, true)\n\tswitch {",
		"\to, err := settled{phase: PhaseRolledBack, text: \"rolled back\"}, error(nil)\n\tswitch {"},
	{"a retried activation taken for finished (the attempt's status as the activation's)", "internal/agreement/scripts/unit.sh",
		`[ "$rc" = {{.SwitchLockedExit}} ] || echo "$rc" > "$d/activated"`, `[ "$rc" = {{.SwitchLockedExit}} ] || :; echo "$rc" > "$d/activated"`},
	{"the watchdog switches back while an attempt runs", "internal/agreement/scripts/watchdog.sh",
		"\n{{.StopAttempts}}\n", "\n:\n"},
	{"the activation starts without its lease", "internal/agreement/scripts/unit.sh",
		`if [ "$fleet_t" != {{q .Run}} ]; then echo`, `if false && [ "$fleet_t" != {{q .Run}} ]; then echo`},
	{"a host's records lost in a reboot read as a run that never started", "internal/agreement/scripts/ask.sh",
		`[ -d "$d" ] || echo lost=yes`, `mkdir -p "$d"`},
	{"a deploy's reboot not fenced", "internal/agreement/keys.go",
		`fenceScript + "fleet_fence " + shell.Quote(run) + " reboot\nsystemctl reboot\n"`, `"systemctl reboot\n"`},
	{"the deployer takes a host for decided at half confirm_timeout", "internal/agreement/timing.go",
		"func (t Timing) HostGivesUp() time.Duration { return t.Confirm + watchdogTick }",
		"func (t Timing) HostGivesUp() time.Duration { return t.Confirm / 2 }"},
	{"the watchdog waits twice confirm_timeout", "internal/agreement/host.go",
		"Confirm:            centis(a.Timing.Confirm),", "Confirm:            centis(2 * a.Timing.Confirm),"},
	{"a lease ends after twice its silence", "internal/agreement/host.go",
		"LeaseMisses: leaseMisses,", "LeaseMisses: 2 * leaseMisses,"},
	{"a spare only once the host may have decided", "internal/agreement/timing.go",
		"return max(2*t.WordEvery(), t.Confirm/3)", "return t.HostGivesUp()"},
	{"a word every confirm_timeout", "internal/agreement/timing.go",
		"return min(max(t.Confirm/4, 100*time.Millisecond), time.Second)", "return t.Confirm"},
}

func main() {
	schedules := flag.Int("schedules", 50, "fresh schedules the explorer draws for each mutation")
	only := flag.String("run", "", "comma-separated substrings: only the mutations whose names hold one")
	flag.Parse()
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "bench", "out"), 0o755); err != nil {
		fail(err)
	}
	var chosen []mutation
	for _, m := range mutations {
		if *only != "" && !matches(m.name, *only) {
			continue
		}
		if err := check(root, m); err != nil {
			fail(fmt.Errorf("%s: %w", m.name, err))
		}
		chosen = append(chosen, m)
	}
	var rows strings.Builder
	rows.WriteString("mutation\tcaught by\tfirst seed\ttook\n")
	missed := 0
	for _, m := range chosen {
		start := time.Now()
		broke, err := try(root, m, *schedules)
		if err != nil {
			fail(fmt.Errorf("%s: %w", m.name, err))
		}
		first := "-"
		if len(broke) > 0 {
			first = strconv.FormatUint(broke[0], 10)
		} else {
			missed++
		}
		row := fmt.Sprintf("%s\t%d of %d fresh schedules\t%s\t%s\n", m.name, len(broke), *schedules, first, time.Since(start).Round(time.Second))
		fmt.Fprint(os.Stderr, strings.ReplaceAll(row, "\t", "  "))
		rows.WriteString(row)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	if _, err := io.WriteString(tw, rows.String()); err != nil {
		fail(err)
	}
	if err := tw.Flush(); err != nil {
		fail(err)
	}
	if missed > 0 {
		fmt.Fprintf(os.Stderr, "mutate-agreement: %d mutations caught by no schedule\n", missed)
		os.Exit(1)
	}
}

func matches(name, only string) bool {
	for _, s := range strings.Split(only, ",") {
		if s != "" && strings.Contains(name, s) {
			return true
		}
	}
	return false
}

var brokePattern = regexp.MustCompile(`explored \d+ schedules .*; \d+ broke the agreement: \[([0-9 ]*)\]`)

// try applies m in a worktree of HEAD and explores; it returns the seeds
// whose schedules broke an invariant.
func try(root string, m mutation, schedules int) ([]uint64, error) {
	dir, err := os.MkdirTemp("", "mutate-agreement-")
	if err != nil {
		return nil, err
	}
	tree := filepath.Join(dir, "tree")
	defer func() {
		_ = exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).Run()
		_ = os.RemoveAll(dir)
	}()
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", tree, "HEAD").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("git worktree add: %v: %s", err, out)
	}
	path := filepath.Join(tree, m.file)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	mutated, err := m.apply(string(b))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "test", "-race", "-count=1", "-timeout", "0", "-parallel", "8", "-v", "-run", "^TestHostAgreementExplored$", "./internal/deploy/")
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "FLEET_EXPLORE_FRESH_ONLY=1", "FLEET_EXPLORE_SCHEDULES="+strconv.Itoa(schedules))
	out, _ := cmd.CombinedOutput()
	if err := os.WriteFile(filepath.Join(root, "bench", "out", "mutate-"+slug(m.name)+".txt"), out, 0o644); err != nil {
		return nil, err
	}
	match := brokePattern.FindSubmatch(out)
	if match == nil {
		return nil, fmt.Errorf("the explorer did not say what it explored (does the mutation build?):\n%s", tail(string(out), 20))
	}
	var seeds []uint64
	for _, f := range strings.Fields(string(match[1])) {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, err
		}
		seeds = append(seeds, n)
	}
	sort.Slice(seeds, func(i, j int) bool { return seeds[i] < seeds[j] })
	return seeds, nil
}

// apply is text, m's file, with m's old text replaced by its new; an
// error when the old text does not occur in it exactly once.
func (m mutation) apply(text string) (string, error) {
	if n := strings.Count(text, m.old); n != 1 {
		return "", fmt.Errorf("the text to mutate occurs %d times in %s (want once): the code changed; update the mutation", n, m.file)
	}
	return strings.Replace(text, m.old, m.new, 1), nil
}

// check says whether m applies to HEAD (see apply), before any is
// explored: a mutation the code outgrew fails at once, not after the
// ones before it have run.
func check(root string, m mutation) error {
	out, err := exec.Command("git", "-C", root, "show", "HEAD:"+m.file).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return fmt.Errorf("git show HEAD:%s: %w", m.file, err)
	}
	_, err = m.apply(string(out))
	return err
}

func slug(s string) string {
	return strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(s), "-"), "-")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutate-agreement:", err)
	os.Exit(2)
}
