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
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// mutation is one change to the code, an exact text replaced once (and,
// with old2, a second one in the same file). With tests set it is caught
// by those tests (go test -run tests in pkg), not by exploring.
type mutation struct {
	name, file, old, new string
	old2, new2           string
	tests, pkg           string
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
		`[ "$fleet_t" = "$1" ] || { fleet_log {{.StateDir}}/"$1" refused "$2" lease "$fleet_t"; echo "{{.FencedMarker}}another deployment's lease holds the host's deploy lock: this deployer's had ended" >&2; exit {{.FencedExit}}; }`,
		`:`, "", "", "", ""},
	{"a new lease does not wait for the earlier run's actors (the guard)", "internal/agreement/scripts/take.sh",
		"until flock -n 8; do", "until true; do", "", "", "", ""},
	{"the host never ends a silent lease", "internal/agreement/scripts/take.sh",
		"[ $fleet_m -lt {{.LeaseMisses}} ] || { fleet_log {{.StateDir}}/{{q .Run}} lease-silent; kill -TERM $fleet_me; exit 0; }", "[ $fleet_m -lt {{.LeaseMisses}} ] || :", "", "", "", ""},
	{"a confirmation the watchdog had refused recorded Succeeded", "internal/deploy/steps.go",
		"case err == nil && decision == agreement.DecisionConfirm:",
		"case err == nil && (decision == agreement.DecisionConfirm || decision == agreement.DecisionRollback):", "", "", "", ""},
	{"a lost confirmation's answer recorded RolledBack without asking", "internal/deploy/steps.go",
		"\to, err := nr.settle(ctx, true)\n\tswitch {",
		"\to, err := settled{phase: PhaseRolledBack, text: \"rolled back\"}, error(nil)\n\tswitch {", "", "", "", ""},
	{"a retried activation taken for finished (the attempt's status as the activation's)", "internal/agreement/scripts/unit.sh",
		`[ "$rc" = {{.SwitchLockedExit}} ] || echo "$rc" > "$d/activated"`, `[ "$rc" = {{.SwitchLockedExit}} ] || :; echo "$rc" > "$d/activated"`, "", "", "", ""},
	{"the watchdog switches back while an attempt runs", "internal/agreement/scripts/watchdog.sh",
		"\n{{.StopAttempts}}\n", "\n:\n", "", "", "", ""},
	{"the activation starts without its lease", "internal/agreement/scripts/unit.sh",
		`if [ "$fleet_t" != {{q .Run}} ]; then echo`, `if false && [ "$fleet_t" != {{q .Run}} ]; then echo`, "", "", "", ""},
	{"a host's records lost in a reboot read as a run that never started", "internal/agreement/scripts/ask.sh",
		`[ -d "$d" ] || echo lost=yes`, `mkdir -p "$d"`, "", "", "", ""},
	{"a deploy's reboot not fenced", "internal/agreement/keys.go",
		`fenceScript + "fleet_fence " + shell.Quote(run) + " reboot\nsystemctl reboot\n"`, `"systemctl reboot\n"`, "", "", "", ""},
	{"the deployer takes a host for decided at half confirm_timeout", "internal/agreement/timing.go",
		"func (t Timing) HostGivesUp() time.Duration { return t.Confirm + watchdogTick }",
		"func (t Timing) HostGivesUp() time.Duration { return t.Confirm / 2 }", "", "", "", ""},
	{"the watchdog waits twice confirm_timeout", "internal/agreement/host.go",
		"Confirm:            centis(a.Timing.Confirm),", "Confirm:            centis(2 * a.Timing.Confirm),", "", "", "", ""},
	{"a lease ends after twice its silence", "internal/agreement/host.go",
		"LeaseMisses: leaseMisses,", "LeaseMisses: 2 * leaseMisses,", "", "", "", ""},
	{"a spare only once the host may have decided", "internal/agreement/timing.go",
		"return max(2*t.WordEvery(), t.Confirm/3)", "return t.HostGivesUp()", "", "", "", ""},
	{"a word every confirm_timeout", "internal/agreement/timing.go",
		"return min(max(t.Confirm/4, 100*time.Millisecond), time.Second)", "return t.Confirm", "", "", "", ""},
}

// keyMutations are issue 47's: the six that survived every test of the
// review (a temporary file 0644 while the content is written, the key
// action unfenced, the restart action unfenced, an unchanged boot id
// accepted as back, the units of keys not written restarted, the key
// written straight to its destination), the seventh that only an
// acceptance test caught (after-verdict keys uploaded before the
// activation), and the review's others: a link or a directory another
// user can write followed, something other than a file at a destination
// written into, a boot back that undoes another deployer's switch, a
// reboot that does not happen waited for to the end, a boot back without
// the after-verdict keys, KeysUploaded assumed rather than read, a failure
// after the reboot not undone. Each is caught by the tests it names.
var keyMutations = []mutation{
	{name: "a key's temporary file 0644 while its content is written", file: "internal/agreement/scripts/keys.sh",
		old: `chmod -- "$5" /proc/self/fd/3 2>/dev/null || fleet_key_fail "$2" "chmod $5 failed"`, new: `chmod 0644 /proc/self/fd/3`,
		old2: "fleet_c=\nexec 3>&-", new2: "fleet_c=\nchmod -- \"$5\" /proc/self/fd/3\nexec 3>&-",
		tests: "TestKeysContentGoesToATemporaryFileOfTheKeysModeAndOwner", pkg: "./internal/deploy/"},
	{name: "the key action unfenced", file: "internal/agreement/scripts/keys.sh",
		old: "fleet_fence {{q .Run}} {{q .Action}}", new: ":",
		tests: "TestKeysAndRebootActionsAreFenced", pkg: "./internal/agreement/"},
	{name: "the restart action unfenced", file: "internal/agreement/keys.go",
		old: `fenceScript + "fleet_fence " + shell.Quote(run) + " " + shell.Quote(action) + "\nsystemctl restart`, new: `"systemctl restart`,
		tests: "TestKeysAndRebootActionsAreFenced", pkg: "./internal/agreement/"},
	{name: "an unchanged boot id accepted as back", file: "internal/deploy/reboot.go",
		old: "case err == nil && id != before:", new: "case err == nil:",
		tests: "TestRebootAHostThatTakesLoginsWhileItShutsDown", pkg: "./internal/deploy/"},
	{name: "the units of keys not written restarted", file: "internal/deploy/keys.go",
		old:   "\tfor _, u := range h.Restart {\n\t\tnr.restartLater(u)\n\t}\n",
		new:   "\tfor _, u := range h.Restart {\n\t\tnr.restartLater(u)\n\t}\n\tfor _, k := range keys {\n\t\tfor _, u := range k.RestartUnits {\n\t\t\tnr.restartLater(u)\n\t\t}\n\t}\n",
		tests: "TestKeysPartlyWrittenRestartWhatWasWritten|TestKeysOnlyReachTheHostWhole", pkg: "./internal/deploy/"},
	{name: "a key written straight to its destination", file: "internal/agreement/scripts/keys.sh",
		old:  `fleet_t=$(mktemp -- "$fleet_d/.fleet-key.XXXXXX" 2>/dev/null) || { fleet_t=; fleet_key_fail "$2" "its directory $fleet_d is not writable"; }`,
		new:  `fleet_t=$fleet_f; : > "$fleet_t"`,
		old2: `mv -T -f -- "$fleet_t" "$fleet_f" 2>/dev/null || fleet_key_fail "$2" "the written file could not be renamed to it (is something other than a file there now?)"`, new2: ":",
		tests: "TestKeysContentGoesToATemporaryFileOfTheKeysModeAndOwner", pkg: "./internal/deploy/"},
	{name: "after-verdict keys uploaded before the activation", file: "internal/deploy/keys.go",
		old: "if k.Upload == upload || upload == UploadBeforeActivation && k.Upload == \"\" {", new: "if k.Upload == upload || upload == UploadBeforeActivation {",
		tests: "TestKeysRotatedWithASwitchRestartTheirUnits", pkg: "./internal/deploy/"},
	{name: "a key's directory another user owns followed", file: "internal/agreement/scripts/keypath.sh",
		old: `[ "$4" = 0 ] || { fleet_why=`, new: `[ -n "$4" ] || { fleet_why=`,
		tests: "TestKeysRefuseADirectoryAnotherUserCanWrite|TestKeysInAHostileUsersDirectoryAreRefused", pkg: "./internal/deploy/"},
	{name: "a key's directory an ACL lets another user write followed", file: "internal/agreement/scripts/keypath.sh",
		old: "case $2 in ??????????+*) fleet_why=", new: "case $2 in ??????????+*x) fleet_why=",
		tests: "TestKeysRefuseADirectoryAnACLLetsAnotherUserWrite", pkg: "./internal/deploy/"},
	{name: "a link met on a key's path followed without checking where it leads", file: "internal/agreement/scripts/keypath.sh",
		old: "fleet_chain_safe \"$fleet_x\" || return 1\nelif", new: "elif",
		tests: "TestKeysRemovalNeverFollowsAUsersLink|TestKeysRefuseADirectoryAnotherUserCanWrite", pkg: "./internal/deploy/"},
	{name: "the key query reads a file of any size", file: "internal/agreement/keys.go",
		old: "[ \"$1\" -le `", new: "[ \"$1\" -ge 0 ] || [ \"$1\" -le `",
		tests: "TestKeysQueryOfAUsersFileIsBounded", pkg: "./internal/deploy/"},
	{name: "a key is moved into a directory planted at its destination (mv without -T)", file: "internal/agreement/scripts/keys.sh",
		old: `mv -T -f -- "$fleet_t" "$fleet_f"`, new: `mv -f -- "$fleet_t" "$fleet_f"`,
		tests: "TestKeysNeverMovedIntoADirectoryPlantedAtTheDestination", pkg: "./internal/deploy/"},
	{name: "a key's units recorded as waiting only after its rename", file: "internal/agreement/scripts/keys.sh",
		old: "[ -z \"$6\" ] || { [ -d {{q .RecordDir}} ]", new: "[ -n \"$6\" ] || { [ -d {{q .RecordDir}} ]",
		old2: "fleet_t=\nfleet_log \"$fleet_run_dir\" wrote key \"$2\"\nfleet_record \"$2\"\n", new2: "fleet_t=\nfleet_log \"$fleet_run_dir\" wrote key \"$2\"\n[ -z \"$6\" ] || printf '%s\\n' $6 >> \"$fleet_rec.restart\"\nfleet_record \"$2\"\n",
		tests: "TestKeysUnitsWaitWhenCutShortAfterTheRename", pkg: "./internal/deploy/"},
	{name: "waiting units cleared though their restart failed", file: "internal/agreement/keys.go",
		old: `" && rm -f -- "`, new: `"; rm -f -- "`,
		tests: "TestKeysUnitsWaitWhenTheirRestartFails", pkg: "./internal/deploy/"},
	{name: "a key removed though another deployment's record names it", file: "internal/agreement/scripts/keys.sh",
		old: `if [ -n "$fleet_o" ]; then echo`, new: `if false; then echo`,
		tests: "TestKeysSharedWithAnotherDeploymentStay", pkg: "./internal/deploy/"},
	{name: "a host something else switched booted back", file: "internal/deploy/reboot.go",
		old: "if current != nr.n.System && current != prev {", new: "if false {",
		tests: "TestRebootLeavesAHostSwitchedByHand", pkg: "./internal/deploy/"},
	{name: "another deployer's switch undone after a lost lease", file: "internal/deploy/reboot.go",
		old: "\t\tif len(o.acted) > 0 {\n\t\t\tf := nr.leftToOthers(o, \"was to get its boot entry back\")", new: "\t\tif false {\n\t\t\tf := nr.leftToOthers(o, \"was to get its boot entry back\")",
		tests: "TestRebootUndoLeavesAnotherDeployersSwitch", pkg: "./internal/deploy/"},
	{name: "another deployer's switch undone after the boot back", file: "internal/deploy/reboot.go",
		old: "\tif len(o.acted) > 0 {\n\t\tf := nr.leftToOthers(o, \"booted back\")", new: "\tif false {\n\t\tf := nr.leftToOthers(o, \"booted back\")",
		tests: "TestRebootUndoLeavesAnotherDeployersSwitch", pkg: "./internal/deploy/"},
	{name: "the boot verdict's record unfenced", file: "internal/deploy/reboot.go",
		old: "agreement.FencedMarkScript(nr.run(), nr.n.System)", new: "agreement.Remote(agreement.MarkScript(nr.n.System))",
		tests: "TestRebootVerdictRecordedOnlyUnderItsLease", pkg: "./internal/deploy/"},
	{name: "KeysUploaded not read again after the lease ended", file: "internal/deploy/keys.go",
		old: "if nr.keys.under == nil || nr.keys.under != nr.lock || nr.lock.Lost() {", new: "if nr.keys.under == nil {",
		tests: "TestRebootAgainDuringTheBootVerdictKeysNotAssumed", pkg: "./internal/deploy/"},
	{name: "something other than a file at a key's destination written over", file: "internal/agreement/scripts/keys.sh",
		old: "fleet_not_file \"$2\" \"$fleet_f\"\n", new: "\n",
		tests: "TestKeysRefuseWhatIsNotAFileAtTheDestination", pkg: "./internal/deploy/"},
	{name: "a boot back that undoes another deployer's switch", file: "internal/deploy/reboot.go",
		old: "\t\tif len(o.acted) > 0 {\n\t\t\treturn nr.leftToOthers(o, \"came back from its reboot\")", new: "\t\tif false {\n\t\t\treturn nr.leftToOthers(o, \"came back from its reboot\")",
		tests: "TestRebootLeavesAnotherDeployersSwitch", pkg: "./internal/deploy/"},
	{name: "a reboot that does not happen waited for to the end", file: "internal/deploy/reboot.go",
		old: "case !away && time.Since(nr.rebootAskedAt) > nr.d.rebootStartBound():", new: "case false:",
		tests: "TestRebootThatDoesNotHappenPutsTheEntryBack", pkg: "./internal/deploy/"},
	{name: "a boot back without the after-verdict keys", file: "internal/deploy/reboot.go",
		old: `err := nr.putKeys(ctx, "keys", nr.n.Keys, false)`, new: `err := nr.putKeys(ctx, "keys", nr.keysFor(UploadBeforeActivation), false)`,
		tests: "TestRebootBootBackPutsEveryKeyBack", pkg: "./internal/deploy/"},
	{name: "KeysUploaded assumed, not read from the host", file: "internal/deploy/keys.go",
		old: "\t\tif why := nr.keys.here[k.Name]; why != \"\" {\n\t\t\tmissing", new: "\t\tif why := nr.keys.here[k.Name]; false {\n\t\t\tmissing",
		tests: "TestKeysAfterVerdictWaitForAVerdict|TestRebootByHandDuringTheKeys", pkg: "./internal/deploy/"},
	{name: "a failure after the reboot not undone", file: "internal/deploy/node.go",
		old: "if nr.entrySet && !nr.judged && !nr.leftAlone && f.phase != PhaseUnknown {", new: "if false {",
		tests: "TestRebootKeyFailureAfterTheRebootBootsBack|TestRebootThatDoesNotHappenPutsTheEntryBack", pkg: "./internal/deploy/"},
}

func main() {
	schedules := flag.Int("schedules", 50, "fresh schedules the explorer draws for each mutation")
	only := flag.String("run", "", "comma-separated substrings: only the mutations whose names hold one")
	list := flag.Bool("list", false, "check that each mutation applies to HEAD and list them, running nothing")
	flag.Parse()
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "bench", "out"), 0o755); err != nil {
		fail(err)
	}
	var chosen []mutation
	for _, m := range append(slices.Clone(mutations), keyMutations...) {
		if *only != "" && !matches(m.name, *only) {
			continue
		}
		if err := check(root, m); err != nil {
			fail(fmt.Errorf("%s: %w", m.name, err))
		}
		chosen = append(chosen, m)
		if *list {
			by := "fresh schedules"
			if m.tests != "" {
				by = m.tests
			}
			fmt.Printf("%s\t(%s)\n", m.name, by)
		}
	}
	if *list {
		return
	}
	var rows strings.Builder
	rows.WriteString("mutation\tcaught by\tfirst seed\ttook\n")
	missed := 0
	for _, m := range chosen {
		start := time.Now()
		if m.tests != "" {
			failed, err := tryTests(root, m)
			if err != nil {
				fail(fmt.Errorf("%s: %w", m.name, err))
			}
			caught := "no test: " + m.tests
			if len(failed) > 0 {
				caught = strings.Join(failed, ", ")
			} else {
				missed++
			}
			row := fmt.Sprintf("%s\t%s\t-\t%s\n", m.name, caught, time.Since(start).Round(time.Second))
			fmt.Fprint(os.Stderr, strings.ReplaceAll(row, "\t", "  "))
			rows.WriteString(row)
			continue
		}
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
		fmt.Fprintf(os.Stderr, "mutate-agreement: %d mutations caught by no schedule or test\n", missed)
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

// worktree makes a worktree of HEAD with m applied; done removes it.
func worktree(root string, m mutation) (tree string, done func(), err error) {
	dir, err := os.MkdirTemp("", "mutate-agreement-")
	if err != nil {
		return "", nil, err
	}
	tree = filepath.Join(dir, "tree")
	done = func() {
		_ = exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).Run()
		_ = os.RemoveAll(dir)
	}
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", tree, "HEAD").CombinedOutput(); err != nil {
		done()
		return "", nil, fmt.Errorf("git worktree add: %v: %s", err, out)
	}
	path := filepath.Join(tree, m.file)
	b, err := os.ReadFile(path)
	if err == nil {
		var mutated string
		if mutated, err = m.apply(string(b)); err == nil {
			err = os.WriteFile(path, []byte(mutated), 0o644)
		}
	}
	if err != nil {
		done()
		return "", nil, err
	}
	return tree, done, nil
}

var (
	failPattern = regexp.MustCompile(`(?m)^--- FAIL: (\S+)`)
	okPattern   = regexp.MustCompile(`(?m)^ok\s`)
)

// tryTests applies m in a worktree of HEAD and runs its tests; it returns
// those that failed. A mutation that does not build is an error.
func tryTests(root string, m mutation) ([]string, error) {
	tree, done, err := worktree(root, m)
	if err != nil {
		return nil, err
	}
	defer done()
	cmd := exec.Command("go", "test", "-race", "-count=1", "-timeout", "20m", "-parallel", "8", "-run", "^("+m.tests+")$", m.pkg)
	cmd.Dir = tree
	out, _ := cmd.CombinedOutput()
	if err := os.WriteFile(filepath.Join(root, "bench", "out", "mutate-"+slug(m.name)+".txt"), out, 0o644); err != nil {
		return nil, err
	}
	if strings.Contains(string(out), "[build failed]") || strings.Contains(string(out), "[setup failed]") {
		return nil, fmt.Errorf("the mutation does not build:\n%s", tail(string(out), 20))
	}
	var failed []string
	for _, f := range failPattern.FindAllSubmatch(out, -1) {
		failed = append(failed, string(f[1]))
	}
	if len(failed) == 0 && !okPattern.Match(out) {
		return nil, fmt.Errorf("the tests did not run:\n%s", tail(string(out), 20))
	}
	return failed, nil
}

var brokePattern = regexp.MustCompile(`explored \d+ schedules .*; \d+ broke the agreement: \[([0-9 ]*)\]`)

// try applies m in a worktree of HEAD and explores; it returns the seeds
// whose schedules broke an invariant.
func try(root string, m mutation, schedules int) ([]uint64, error) {
	tree, done, err := worktree(root, m)
	if err != nil {
		return nil, err
	}
	defer done()
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
	for _, e := range [][2]string{{m.old, m.new}, {m.old2, m.new2}} {
		if e[0] == "" {
			continue
		}
		if n := strings.Count(text, e[0]); n != 1 {
			return "", fmt.Errorf("the text to mutate occurs %d times in %s (want once): the code changed; update the mutation", n, m.file)
		}
		text = strings.Replace(text, e[0], e[1], 1)
	}
	return text, nil
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
