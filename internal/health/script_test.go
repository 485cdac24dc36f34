package health

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

func parseScript() script {
	return newScript("parse-node", []ScriptCheck{CommandCheck{Command: "a"}, CommandCheck{Command: "b"}, PathCheck{Path: "/x"}}, time.Second, 0)
}

func TestNewScriptTag(t *testing.T) {
	t.Parallel()
	s1, s2 := parseScript(), parseScript()
	if !regexp.MustCompile(`^@@fleet-[0-9a-f]{12}$`).MatchString(s1.tag) || s1.tag == s2.tag {
		t.Errorf("tags %q, %q: want @@fleet- and 12 random hex digits, different each time", s1.tag, s2.tag)
	}
	if s1.n != 3 || !strings.Contains(s1.text, s1.tag+" 0 ") || !strings.Contains(s1.text, s1.tag+" 2 ") {
		t.Errorf("script of 3 checks: n %d, text does not report under its tag:\n%s", s1.n, s1.text)
	}
}

func TestScriptParse(t *testing.T) {
	t.Parallel()
	s := parseScript()
	T := s.tag
	type want struct {
		status string
		exit   int
		ms     int64
		since  time.Time
		output string
	}
	missing := want{}
	for _, c := range []struct {
		name  string
		out   string
		parts []want
	}{
		{"empty", "", []want{missing, missing, missing}},
		{"garbage", "sh: 1: syntax error\n\x00\xff\n@@fleet-000000000000 0 done 0 1\n", []want{missing, missing, missing}},
		{"complete", T + " 0 done 0 12\nout a\n" + T + " 1 done 3 5\nline1\nline2\n" + T + " 2 timeout\ntier statvfs\ntier heartbeat\n",
			[]want{{"done", 0, 12, time.Time{}, "out a\n"}, {"done", 3, 5, time.Time{}, "line1\nline2\n"}, {"timeout", -1, 0, time.Time{}, "tier statvfs\ntier heartbeat\n"}}},
		{"outstanding", T + " 0 outstanding 1700000000\n" + T + " 1 outstanding\n",
			[]want{{"outstanding", -1, 0, time.Unix(1700000000, 0).UTC(), ""}, {"outstanding", -1, 0, time.Time{}, ""}, missing}},
		{"partial: the last lines never came", T + " 0 done 0 12\nout a\n" + T + " 1 do",
			[]want{{"done", 0, 12, time.Time{}, "out a\n"}, {"do", -1, 0, time.Time{}, ""}, missing}},
		{"partial: cut inside a header", T + " 0 done 0 12\n" + T + " 1 done 3\n" + T + " ",
			[]want{{"done", 0, 12, time.Time{}, ""}, missing, missing}},
		{"garbled exit status is no verdict", T + " 0 done x 12\n" + T + " 1 done 0 y\n" + T + " 2 done 0 3\n",
			[]want{missing, missing, {"done", 0, 3, time.Time{}, ""}}},
		{"bare tag and bad indexes", T + "\n" + T + " \n" + T + "   \n" + T + " 1\n" + T + " 9 done 0 1\n" + T + " -1 done 0 1\n" + T + " x done 0 1\n",
			[]want{missing, missing, missing}},
		{"output without a final newline", T + " 0 done 4 1\ndisk full" + T + " 1 done 0 2\nall good" + T + " 2 done 0 3\n",
			[]want{{"done", 4, 1, time.Time{}, "disk full"}, {"done", 0, 2, time.Time{}, "all good"}, {"done", 0, 3, time.Time{}, ""}}},
		{"another script's tag is output", T + " 0 done 0 1\n@@fleet-0123456789ab 1 done 0 1\n",
			[]want{{"done", 0, 1, time.Time{}, "@@fleet-0123456789ab 1 done 0 1\n"}, missing, missing}},
	} {
		t.Run(c.name, func(t *testing.T) {
			parts, err := s.parse(c.out)
			if err != nil {
				t.Fatal(err)
			}
			if len(parts) != 3 {
				t.Fatalf("%d parts, want 3", len(parts))
			}
			for i, w := range c.parts {
				p := parts[i]
				// The split leaves the last body an extra newline; lastLine trims it.
				if p.status != w.status || (w.status != "" && (p.exit != w.exit || p.ms != w.ms || !p.since.Equal(w.since) ||
					strings.TrimRight(p.output, "\n") != strings.TrimRight(w.output, "\n"))) {
					t.Errorf("part %d = %+v, want %+v", i, p, w)
				}
			}
		})
	}

	_, err := s.parse("umask: whatever\n" + T + " fatal cannot create the marker directory /x\n" + T + " 0 done 0 1\n")
	if err == nil || err.Error() != "the node's shell could not run the checks: cannot create the marker directory /x" {
		t.Errorf("fatal line: %v", err)
	}
	if _, err := s.parse(T + " fatal\n"); err == nil {
		t.Errorf("bare fatal line: no error")
	}
}

// The evaluator's side: a shell that reports nothing, or is cut short,
// leaves every unreported check saying so; one that cannot run the checks
// says why. Each is a real shell misbehaving.
func TestScriptNodeShellMisbehaves(t *testing.T) {
	t.Parallel()
	checks := map[string]CheckDecl{
		"one": specDecl("command", map[string]any{"command": "echo one"}),
		"two": specDecl("command", map[string]any{"command": "echo two"}),
	}
	for _, c := range []struct {
		name  string
		shell []string
		one   string // detail of check one
		two   string
	}{
		{"garbage", []string{"/bin/sh", "-c", "cat >/dev/null; echo garbage; echo '@@fleet-000000000000 0 done 0 1'"},
			"the node's shell reported nothing for this check", "the node's shell reported nothing for this check"},
		{"truncated", []string{"/bin/sh", "-c", "/bin/sh -s | head -n 2"},
			"exit 0", "the node's shell reported nothing for this check"},
		{"no shell", []string{"/nonexistent/sh", "-s"},
			// Not a timeout: the shell never started.
			"the checks could not run: /nonexistent/sh: ", "the checks could not run: /nonexistent/sh: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			node := uniqueNode(t, "shell")
			p := kindPolicy(node, Node{Local: true}, 2*time.Second, checks)
			forgetMarkers(t, p, node)
			r, _ := evalNode(t, newEvaluator(c.shell), p, node)
			one, two := result(t, r, "command:echo one"), result(t, r, "command:echo two")
			if !strings.HasPrefix(one.Detail, c.one) || !strings.HasPrefix(two.Detail, c.two) {
				t.Errorf("details %q, %q; want %q, %q\n%s", one.Detail, two.Detail, c.one, c.two, describeReport(r, p))
			}
			if c.one == "exit 0" != one.Healthy || two.Healthy || one.TimedOut || two.TimedOut {
				t.Errorf("healthy %v, %v\n%s", one.Healthy, two.Healthy, describeReport(r, p))
			}
		})
	}
}

// A node whose shell refuses to run the checks (here it cannot make its
// marker directory) is not evaluated: missing, with the shell's words,
// never in error.
func TestScriptRefusedLeavesTheNodeUnevaluated(t *testing.T) {
	t.Parallel()
	checks := map[string]CheckDecl{"one": specDecl("command", map[string]any{"command": "echo one"})}
	node := uniqueNode(t, "shell")
	p := kindPolicy(node, Node{Local: true}, 2*time.Second, checks)
	r, _ := evalNode(t, newEvaluator([]string{"env", "TMPDIR=/dev/null/x", "/bin/sh", "-s"}), p, node)
	if r.State() != StateMissing || r.Unreachable == nil || r.Unreachable.Reason != sshdial.ReasonConfig {
		t.Fatalf("state %s, unreachable %+v; want missing (config)\n%s", r.State(), r.Unreachable, describeReport(r, p))
	}
	wantContains(t, "reason", r.Reason(p), "it could not run its checks: its shell refused them", "the node's shell could not run the checks: cannot create the marker directory /dev/null/x/fleet-node-health.")
}

func TestLocalMarkerDirectoryRefused(t *testing.T) {
	t.Parallel()
	checkMarkerDirectoryRefused(t, func(t *testing.T, tmpdir string) (Node, *Evaluator) {
		return Node{Local: true}, newEvaluator([]string{"env", "TMPDIR=" + tmpdir, "/bin/sh", "-s"})
	})
}

func TestSSHDMarkerDirectoryRefused(t *testing.T) {
	t.Parallel()
	checkMarkerDirectoryRefused(t, func(t *testing.T, tmpdir string) (Node, *Evaluator) {
		s := sshtest.StartSSHD(t, sshtest.WithConfigLines("SetEnv TMPDIR="+tmpdir))
		return sshdNode(s), newEvaluator(nil)
	})
}

// checkMarkerDirectoryRefused: the node keeps its probe markers, and
// writes them (as root, say), in ${TMPDIR:-/tmp}/fleet-node-health.<uid>,
// a predictable name in a directory everyone can write. One that another
// user made (owned by someone else), that others can write, or that is a
// symbolic link is refused before anything is written in or through it:
// the checks fail naming the directory and the fix. One the login made
// itself is used; a missing one is made, mode 0700. node starts a node
// whose shell sees TMPDIR=tmpdir.
func checkMarkerDirectoryRefused(t *testing.T, node func(t *testing.T, tmpdir string) (Node, *Evaluator)) {
	checks := map[string]CheckDecl{"sh": specDecl("command", map[string]any{"command": "echo ran"})}
	uid := strconv.Itoa(os.Getuid())
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, dir, elsewhere string) // makes dir as an attacker would; nil: nothing there
		want  []string                                  // in the detail, besides the directory's name
	}{
		{"absent: made 0700", nil, nil},
		{"owned by another user", func(t *testing.T, dir, _ string) {
			mkdirMode(t, dir, 0o700)
			if err := os.Lchown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, []string{"is owned by uid 65534, not by this login (uid " + uid + ")", "remove it"}},
		{"writable by others", func(t *testing.T, dir, _ string) { mkdirMode(t, dir, 0o777) },
			[]string{"writable by other users", "drwxrwxrwx", "remove it"}},
		{"writable by the group", func(t *testing.T, dir, _ string) { mkdirMode(t, dir, 0o770) },
			[]string{"writable by other users", "drwxrwx---", "remove it"}},
		{"a symbolic link", func(t *testing.T, dir, elsewhere string) {
			if err := os.Symlink(elsewhere, dir); err != nil {
				t.Fatal(err)
			}
		}, []string{"is a symbolic link", "remove it"}},
		{"in a directory others can write, not sticky", func(t *testing.T, dir, _ string) {
			if err := os.Chmod(filepath.Dir(dir), 0o777); err != nil {
				t.Fatal(err)
			}
		}, []string{"writable by others without the sticky bit", "drwxrwxrwx", "set TMPDIR"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmpdir := t.TempDir()
			dir := filepath.Join(tmpdir, "fleet-node-health."+uid)
			elsewhere := t.TempDir() // where a planted link points
			if c.plant != nil {
				c.plant(t, dir, elsewhere)
			}
			n, e := node(t, tmpdir)
			name := uniqueNode(t, "marker")
			p := kindPolicy(name, n, 5*time.Second, checks)
			r, _ := evalNode(t, e, p, name)
			res := result(t, r, "command:echo ran")
			if c.plant == nil {
				if r.State() != StateHealthy {
					t.Fatalf("no marker directory yet: %s", describeReport(r, p))
				}
				fi, err := os.Lstat(dir)
				if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
					t.Fatalf("the marker directory made: %v, %v; want a directory, mode 0700", fi, err)
				}
				return
			}
			// Nothing was learnt of the node's storage: it is not
			// evaluated (missing), not failed, and another user cannot
			// put it in error this way.
			if res.Healthy || r.State() != StateMissing || r.Reached || r.Unreachable == nil {
				t.Fatalf("a planted marker directory: %s, want missing, not evaluated", describeReport(r, p))
			}
			wantContains(t, "reason", r.Reason(p), append([]string{"it could not run its checks: its shell refused them", "marker directory " + dir}, c.want...)...)
			if entries, err := os.ReadDir(elsewhere); err != nil || len(entries) > 0 {
				t.Errorf("written through the planted link: %v, %v", entries, err)
			}
			if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
				if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
					t.Errorf("written into the planted directory: %v, %v", entries, err)
				}
			}
		})
	}
}

func mkdirMode(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

func FuzzScriptParse(f *testing.F) {
	const T = "@@fleet-0123456789ab"
	for _, seed := range []string{
		"",
		T,
		T + " ",
		T + " 0",
		T + " fatal",
		T + " 0 done 0 12\nout\n" + T + " 1 outstanding 17\n" + T + " 2 timeout\n",
		T + " 0 done x y\n" + T + " 2 done 1",
		"x" + T + " 1 done 0 1" + T + " 2 done 0 2",
		T + " 99999999999999999999 done 0 1\n",
	} {
		f.Add(seed)
	}
	s := script{tag: T, n: 3}
	f.Fuzz(func(t *testing.T, out string) {
		parts, err := s.parse(out)
		if err != nil {
			if !strings.Contains(out, T+" ") || !strings.Contains(out, "fatal") {
				t.Fatalf("error %v without a fatal line", err)
			}
			return
		}
		if len(parts) != s.n {
			t.Fatalf("%d parts, want %d", len(parts), s.n)
		}
		if !strings.Contains(out, T+" ") {
			for i, p := range parts {
				if p.status != "" {
					t.Fatalf("part %d = %+v from output without the tag", i, p)
				}
			}
		}
		for i, p := range parts {
			if p.status == "done" && !strings.Contains(out, "done") {
				t.Fatalf("part %d done without a done header", i)
			}
		}
	})
}
