package agreement

import (
	"fmt"
	"io/fs"
	"os/exec"
	"path"
	"sort"
	"strings"
	"testing"
	"text/template"
	"time"
)

// Every file of scripts/ is a template the package loads, and renders:
// renderAll calls every function that renders one, with sample values,
// and a field a template names that its data lack panics (missingkey=error,
// or no such field). What the host is sent holds no template left over,
// no comment (they are dropped at load), and parses as sh.
func TestScripts(t *testing.T) {
	loaded := map[string]bool{}
	for _, tm := range []*template.Template{takeTmpl, wordsTmpl, fenceTmpl, actTmpl, startWatchdogTmpl, unitTmpl, watchdogTmpl, stopAttemptsTmpl, bootTmpl, askTmpl, keysTmpl, keyPathTmpl} {
		loaded[tm.Name()] = true
	}
	files, err := fs.Glob(scriptFiles, "scripts/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !loaded[path.Base(f)] {
			t.Errorf("%s is embedded but no template of it is loaded", f)
		}
	}
	if len(files) != len(loaded) {
		t.Errorf("%d files embedded, %d templates loaded", len(files), len(loaded))
	}

	scripts := renderAll()
	names := make([]string, 0, len(scripts))
	for name := range scripts {
		names = append(names, name)
	}
	sort.Strings(names)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Log("no sh: the scripts' syntax is not checked")
	}
	for _, name := range names {
		s := scripts[name]
		for _, bad := range []string{"{{", "<no value>", "%!", "%%"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s holds %q:\n%s", name, bad, s)
			}
		}
		for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
			if t0 := strings.TrimSpace(line); t0 == "" || strings.HasPrefix(t0, "#") {
				t.Errorf("%s holds a blank or comment line %q", name, line)
			}
		}
		if sh != "" {
			cmd := exec.Command(sh, "-n")
			cmd.Stdin = strings.NewReader(s)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s does not parse as sh: %v: %s\n%s", name, err, out, s)
			}
		}
	}

	// The activation's unit script is one line (systemd-run writes it
	// into the unit's file), and holds no "#", which would comment out
	// the rest of that line.
	for _, systemd := range []bool{false, true} {
		a := Activation{Run: "0123456789ab", System: "/nix/store/x-system", Previous: "/nix/store/y-system", Attempt: 2, Systemd: systemd}
		if u := a.unitScript(); strings.ContainsAny(u, "\n#") {
			t.Errorf("the unit script holds a newline or a \"#\": %q", u)
		}
		if !strings.Contains(a.Script(), "sh -c 'd=/run/fleet-deploy/0123456789ab; exec 8>>"+GuardFile) {
			t.Errorf("the act command does not run the unit script by sh -c:\n%s", a.Script())
		}
	}
	// The fence's definition ends with a newline: the fenced script's
	// first line follows.
	if !strings.HasSuffix(fenceScript, "}\n") {
		t.Errorf("fenceScript does not end with its function's end and a newline: %q", fenceScript)
	}
	// A keeping word loop counts the lease's words; a spare's does not.
	if !strings.Contains(wordLoop(true), WordsFile) || strings.Contains(wordLoop(false), WordsFile) {
		t.Error("only the lock session's word loop counts the lease's words")
	}
	// The watchdog stops a systemd unit only where systemd runs.
	on, off := Activation{Run: "ab", Systemd: true}.stopAttempts(), Activation{Run: "ab"}.stopAttempts()
	if !strings.Contains(on, "systemctl stop fleet-activate-ab.service") || strings.Contains(off, "systemctl") {
		t.Errorf("stopAttempts: with systemd %q, without %q", on, off)
	}
}

// renderAll renders every script the host runs, for a spread of
// arguments, by a name each.
func renderAll() map[string]string {
	out := map[string]string{}
	timings := []Timing{
		{Confirm: 2 * time.Second, Lease: 2 * time.Second, Activation: time.Minute},
		{Confirm: 90 * time.Second, Lease: 3 * time.Second, Activation: 2500 * time.Millisecond},
		{},
	}
	runs := []string{"0123456789ab", "run x'y"}
	systems := []string{"/nix/store/abc-nixos-system", "/nix/store/a b'c"}
	for i, t := range timings {
		for j, run := range runs {
			out[fmt.Sprintf("take-%d-%d-a", i, j)] = takeScript(run, "host-1 at 2024 (pid 4)", 30, t)
			out[fmt.Sprintf("take-%d-%d-b", i, j)] = takeScript(run, "o'brien", 0, t)
		}
	}
	out["words-keeps"] = wordLoop(true)
	out["words-spare"] = wordLoop(false)
	out["spare"] = spareScript()
	out["fence"] = fenceScript
	out["read"] = readScript
	out["read-current"] = ReadCurrentScript
	for j, run := range runs {
		for k, sys := range systems {
			out[fmt.Sprintf("profile-%d-%d", j, k)] = ProfileScript(run, sys)
			out[fmt.Sprintf("mark-%d", k)] = MarkScript(sys)
			out[fmt.Sprintf("fenced-mark-%d-%d", j, k)] = FencedMarkScript(run, sys)
			out[fmt.Sprintf("profile-back-%d-%d", j, k)] = ProfileBackScript(run, sys)
			out[fmt.Sprintf("since-%d-%d", j, k)] = SinceScript(run, []string{run, "abc"})
			out[fmt.Sprintf("since-none-%d-%d", j, k)] = SinceScript(run, nil)
			out[fmt.Sprintf("keys-%d-%d", j, k)] = KeysScript(run, "keys", "dep "+run, []KeyFile{{Path: sys + "/k y", User: "o'brien", Group: "root", Mode: "0400", Units: []string{"a.service", "b@x.service"}}, {Path: "/run/keys/k"}}, []string{"/a b"}, []string{sys, "/x"})
			out[fmt.Sprintf("keys-none-%d-%d", j, k)] = KeysScript(run, "keys-after", "", nil, nil, nil)
			out[fmt.Sprintf("keys-query-%d-%d", j, k)] = KeysQueryScript(run, []string{sys, "/run/keys/k"})
			out[fmt.Sprintf("restart-%d-%d", j, k)] = RestartScript(run, "restart", run, []string{"a.service", "-.mount"})
			for _, attempt := range []int{1, 2} {
				for _, secs := range []float64{120, 2.5} {
					out[fmt.Sprintf("boot-%d-%d-%d-%g", j, k, attempt, secs)] = BootScript(run, sys, attempt, secs, k%2 == 0)
				}
			}
			for i, t := range timings {
				for _, attempt := range []int{1, 2} {
					for f := 0; f < 16; f++ {
						a := Activation{
							Run: run, System: sys, Previous: systems[1-k], Attempt: attempt,
							SetProfile: f&1 != 0, Watch: f&2 != 0, Systemd: f&4 != 0, Container: f&8 != 0,
							Timing: t,
						}
						name := fmt.Sprintf("act-%d-%d-%d-%d-%02d", i, j, k, attempt, f)
						out[name] = a.Script()
						out[name+"-unit"] = a.unitScript()
						out[name+"-watchdog"] = a.watchdogScript()
						out[name+"-start-watchdog"] = a.startWatchdog()
						out[name+"-stop"] = a.stopAttempts()
					}
				}
			}
		}
		out[fmt.Sprintf("ask-%d-none", j)] = askScript(run, nil)
		out[fmt.Sprintf("ask-%d-one", j)] = askScript(run, []string{"act.1"})
		out[fmt.Sprintf("ask-%d-many", j)] = askScript(run, []string{"act.2", "boot.1", "profile", "x'y"})
	}
	return out
}
