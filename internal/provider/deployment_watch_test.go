package provider_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// logLine is one INFO line of the provider's log about a deployment node.
type logLine struct {
	message, node, step, outcome string
	fields                       map[string]string
	at                           int // line number in the output
}

var (
	providerInfo = regexp.MustCompile(`^\S+ \[INFO\] +provider\.terraform-provider-fleet[^:]*: (.*)$`)
	firstField   = regexp.MustCompile(`: @?[a-z_]+=`)
	logField     = regexp.MustCompile(`(?:^| )(@?[a-z_]+)=("(?:[^"\\]|\\.)*"|\S*)`)
)

// nodeLines reads the provider's INFO lines that carry a node field from a
// CLI's standard error (TF_LOG_PROVIDER=INFO), in order. The message is
// what comes before the first field (the fields come in no fixed order); a
// quoted value is unquoted.
func nodeLines(stderr string) []logLine {
	var out []logLine
	for i, line := range strings.Split(stderr, "\n") {
		m := providerInfo.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rest := m[1]
		first := firstField.FindStringIndex(rest)
		if first == nil {
			continue
		}
		l := logLine{message: rest[:first[0]], at: i, fields: map[string]string{}}
		for _, f := range logField.FindAllStringSubmatch(rest[first[0]+2:], -1) {
			v := f[2]
			if strings.HasPrefix(v, `"`) {
				if u, err := strconv.Unquote(v); err == nil {
					v = u
				}
			}
			l.fields[f[1]] = v
		}
		l.node, l.step, l.outcome = l.fields["node"], l.fields["step"], l.fields["outcome"]
		if l.node != "" {
			out = append(out, l)
		}
	}
	return out
}

// §6 "watching it": during an apply each node's start, each of its steps'
// start and end, and its outcome are INFO lines of the provider's log with
// node and step fields (outcome and duration on the lines that end
// something), one node after the other, as a user sees them with
// TF_LOG_PROVIDER=INFO on the CLI's standard error; a failed step names
// why, and the rollback is a step of its own. Through the built provider
// and one CLI (AlternateCLIs), with a node that succeeds and one that is rolled back.
// (The summary and the DEPLOYING order by name are
// TestDeploymentLogsEachNodeInListOrderAndTheSummary's.)
func TestDeploymentLogsEachStepWithNodeAndStepFields(t *testing.T) {
	t.Parallel()
	binary := acctest.ProviderBinary(t)
	for _, cli := range acctest.AlternateCLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			tg1, tg2 := nixtest.NewTarget(t), nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg1.Boot(t, old)
			tg2.Boot(t, old)
			good := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			bad := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"db.service"}})
			s := acctest.NewBinarySession(t, cli, binary)
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg1, tg2}, []string{good, bad}, ""))
			s.Setenv("TF_LOG_PROVIDER", "INFO")
			_, stderr, code := s.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
			if code == 0 {
				t.Fatalf("the apply with a failing node succeeded:\n%s", stderr)
			}
			lines := nodeLines(stderr)
			if len(lines) == 0 {
				t.Fatalf("no INFO line of the provider with a node field on standard error:\n%s", stderr)
			}
			dump := func() string {
				var b strings.Builder
				for _, l := range lines {
					fmt.Fprintf(&b, "  node=%s step=%s outcome=%q: %s\n", l.node, l.step, l.outcome, l.message)
				}
				return b.String()
			}

			// One node after the other: every line of n1 before any of n2.
			lastN1, firstN2 := -1, len(stderr)
			for _, l := range lines {
				if l.node == "n1" {
					lastN1 = l.at
				} else if l.node == "n2" && l.at < firstN2 {
					firstN2 = l.at
				}
			}
			if lastN1 < 0 || lastN1 > firstN2 {
				t.Errorf("n1's lines (last at line %d) do not all come before n2's (first at line %d):\n%s", lastN1, firstN2, dump())
			}

			// Per node: the start (no step), then each step's start (a
			// line with the step and no outcome) before its end (the
			// step's outcome), in the order of the sequence, then the
			// node's outcome (no step on success).
			type end struct{ step, outcome string }
			want := map[string][]end{
				"n1": {{"connect", "done"}, {"lock", "done"}, {"read", "done"}, {"copy", "done"}, {"activate", "done"},
					{"verdict", "done"}, {"confirm", "done"}, {"finalise", "done"}, {"", "Succeeded"}},
				"n2": {{"connect", "done"}, {"lock", "done"}, {"read", "done"}, {"copy", "done"}, {"activate", "done"},
					{"verdict", "failed"}, {"rollback", "done"}, {"verdict", "RolledBack"}},
			}
			for node, ends := range want {
				var mine []logLine
				for _, l := range lines {
					if l.node == node {
						mine = append(mine, l)
					}
				}
				if len(mine) == 0 || mine[0].message != "DEPLOYING "+node || mine[0].step != "" || mine[0].outcome != "" {
					t.Errorf("%s's first line is not its start (DEPLOYING %s, no step):\n%s", node, node, dump())
					continue
				}
				var got []end
				started := map[string]bool{}
				for _, l := range mine[1:] {
					switch {
					case l.outcome == "" && l.step == "":
						t.Errorf("%s: an INFO line with no step: %q", node, l.message)
					case l.outcome == "":
						started[l.step] = true
					case l.step != "" && !started[l.step] && !strings.HasPrefix(l.message, node+" "):
						t.Errorf("%s: step %s ended (%q) without a line of its start before", node, l.step, l.message)
						fallthrough
					default:
						got = append(got, end{l.step, l.outcome})
						if strings.HasPrefix(l.message, l.step+" ") {
							delete(started, l.step) // a step may run once more (none does today)
						}
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(ends) {
					t.Errorf("%s's ends (step, outcome) in order:\n got %v\nwant %v\n%s", node, got, ends, dump())
				}
			}
			for _, l := range lines {
				if l.node == "n2" && l.step == "verdict" && l.outcome == "failed" && !strings.Contains(l.message, "db.service") {
					t.Errorf("n2's failed verdict does not say why: %q", l.message)
				}
			}
			// A step's end reads as the guide shows it: "copy done in
			// 1.2s" with a duration field.
			copyEnd := regexp.MustCompile(`^copy done in [0-9.]+(µs|ms|s|m[0-9.]+s)$`)
			found := false
			for _, l := range lines {
				if l.node == "n1" && l.step == "copy" && l.outcome == "done" {
					found = copyEnd.MatchString(l.message) && l.fields["duration"] != ""
				}
			}
			if !found {
				t.Errorf("no line \"copy done in <duration>\" with a duration field for n1:\n%s", dump())
			}
		})
	}
}
