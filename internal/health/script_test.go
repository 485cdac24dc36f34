package health

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func parseScript() script {
	return newScript("parse-node", []ScriptCheck{CommandCheck{Command: "a"}, CommandCheck{Command: "b"}, PathCheck{Path: "/x"}}, time.Second, 0)
}

func TestNewScriptTag(t *testing.T) {
	s1, s2 := parseScript(), parseScript()
	if !regexp.MustCompile(`^@@fleet-[0-9a-f]{12}$`).MatchString(s1.tag) || s1.tag == s2.tag {
		t.Errorf("tags %q, %q: want @@fleet- and 12 random hex digits, different each time", s1.tag, s2.tag)
	}
	if s1.n != 3 || !strings.Contains(s1.text, s1.tag+" 0 ") || !strings.Contains(s1.text, s1.tag+" 2 ") {
		t.Errorf("script of 3 checks: n %d, text does not report under its tag:\n%s", s1.n, s1.text)
	}
}

func TestScriptParse(t *testing.T) {
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
		{"no marker directory", []string{"env", "TMPDIR=/dev/null/x", "/bin/sh", "-s"},
			"the node's shell could not run the checks: cannot create the marker directory /dev/null/x/fleet-node-health.",
			"the node's shell could not run the checks: cannot create the marker directory /dev/null/x/fleet-node-health."},
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
