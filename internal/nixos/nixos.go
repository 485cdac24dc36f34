// Package nixos takes a repository's NixOS configurations to systems:
// it evaluates them (all of them in one Nix process) to the store paths
// of their systems and derivations, and builds what this machine's store
// lacks (all of it in one Nix invocation), with the user's Nix as it is
// configured: NIX_CONFIG, nix.conf, substituters and builders are the
// user's; only the experimental features a flake needs are added, per
// invocation. It imports no framework code.
package nixos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// Nix runs the user's Nix.
type Nix struct {
	// Dir holds nix, nix-store and nix-copy-closure; "" finds them on
	// PATH.
	Dir string
	// Env is added to the environment of every Nix process.
	Env []string
	// Ran, when not nil, is called with the arguments of every Nix
	// process started (tests count them).
	Ran func(args []string)
	// Exited, when not nil, is called with the arguments and the end of
	// every Nix process that ran (benchmarks read their resident sizes).
	Exited func(args []string, state *os.ProcessState)
	// CacheDir, when set, keeps flakes' evaluations (see cache.go): a
	// private directory of the user's, made when missing.
	CacheDir string
}

// features are the experimental features an invocation of the nix
// command needs for a flake; they are added, never set, so the user's own
// stay.
const features = "nix-command flakes"

// minVersion is the oldest Nix whose nix command takes flakes,
// --extra-experimental-features and the installables used here.
var minVersion = [2]int{2, 4}

func (n Nix) bin(name string) string {
	if n.Dir != "" {
		return filepath.Join(n.Dir, name)
	}
	return name
}

// command is a Nix process in a process group of its own: interrupted,
// it gets SIGINT (Nix then stops its builders) and, after a grace, the
// group is killed.
func (n Nix) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, n.bin(name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = interruptGrace
	cmd.Env = shell.NixEnviron(n.Env...)
	if n.Ran != nil {
		n.Ran(append([]string{name}, args...))
	}
	return cmd
}

// interruptGrace is how long an interrupted Nix process has to stop its
// builders before its process group is killed.
const interruptGrace = 5 * time.Second

// exited tells Exited that cmd ended.
func (n Nix) exited(cmd *exec.Cmd) {
	if n.Exited != nil && cmd.ProcessState != nil {
		n.Exited(append([]string{filepath.Base(cmd.Path)}, cmd.Args[1:]...), cmd.ProcessState)
	}
}

// killGroup ends what is left of cmd's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// output runs a Nix command and returns its standard output and standard
// error.
func (n Nix) output(ctx context.Context, name string, args ...string) (stdout, stderr string, err error) {
	cmd := n.command(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	n.exited(cmd)
	killGroup(cmd)
	return out.String(), errb.String(), err
}

var (
	versions   sync.Map // binary -> versionResult
	versionPat = regexp.MustCompile(`(\d+)\.(\d+)(?:\.(\d+))?`)
)

type versionResult struct {
	version string
	err     error
}

// Check fails when Nix cannot be run or is older than the nix command's
// flakes: a plain error naming the version found and the one needed. The
// answer is kept per binary for the process's life.
func (n Nix) Check(ctx context.Context) error {
	bin := n.bin("nix")
	if v, ok := versions.Load(bin); ok {
		if res, ok := v.(versionResult); ok {
			return res.err
		}
	}
	out, errOut, err := n.output(ctx, "nix", "--version")
	var res versionResult
	switch m := versionPat.FindStringSubmatch(out); {
	case err != nil:
		res.err = fmt.Errorf("cannot run %s --version (%v%s): install Nix %d.%d or newer, or put its nix on PATH", bin, err, orEmpty(": ", firstLine(errOut)), minVersion[0], minVersion[1])
	case m == nil:
		res.err = fmt.Errorf("%s --version printed %q, not a version: this needs Nix %d.%d or newer", bin, strings.TrimSpace(out), minVersion[0], minVersion[1])
	default:
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		res.version = m[0]
		if major < minVersion[0] || major == minVersion[0] && minor < minVersion[1] {
			res.err = fmt.Errorf("Nix %s is too old: evaluating NixOS configurations needs the nix command with flakes and --extra-experimental-features, from Nix %d.%d", m[0], minVersion[0], minVersion[1])
		}
	}
	if ctx.Err() == nil {
		versions.Store(bin, res)
	}
	return res.err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

func orEmpty(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// errorHead is the head of a Nix error, as Nix printed it: its "error:"
// line, and the position ("at file:line:col") when it gives one, without
// the source lines it quotes.
func errorHead(stderr string) string {
	lines := strings.Split(strings.ReplaceAll(stripColour(stderr), "\r", ""), "\n")
	var head []string
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if !strings.HasPrefix(t, "error:") {
			continue
		}
		head = append(head, t)
		if strings.HasPrefix(t, "error: program '") {
			// A program Nix ran (git, for a git+file source) said why
			// before Nix said that it failed: its first word is the cause.
			if said := programSaid(lines[:i]); said != "" {
				head = append(head, "("+said+")")
				if sshRefused.MatchString(said) {
					head = append(head, "(an input fetched over ssh: git runs ssh as the user running Terraform, with that user's keys and known_hosts; "+
						"give it a key and a known_hosts file with GIT_SSH_COMMAND, or an agent with SSH_AUTH_SOCK, in the environment of terraform or tofu)")
				}
			}
		}
		for _, m := range lines[i+1:] {
			m = strings.TrimSpace(m)
			switch {
			case strings.HasPrefix(m, "at "):
				return strings.Join(append(head, strings.TrimSuffix(m, ":")), " ")
			case strings.HasPrefix(m, "Did you mean"):
				head = append(head, m)
			case m == "" || strings.HasPrefix(m, "…") || strings.HasPrefix(m, "(use"):
			default:
				if len(head) == 1 && !strings.Contains(m, "|") {
					head = append(head, m) // the error's own next line
				}
			}
		}
		return strings.Join(head, " ")
	}
	if t := strings.TrimSpace(stderr); t != "" {
		return lastLines(t, 3)
	}
	return "Nix printed no error"
}

// sshRefused is ssh's word, through git, that it could not log in.
var sshRefused = regexp.MustCompile(`Host key verification failed|Permission denied \(|Could not resolve hostname|Connection refused|No ED25519 host key is known`)

// programSaid is the first line a program printed before Nix's error,
// Nix's own warnings passed over.
func programSaid(before []string) string {
	for _, l := range before {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "warning:") {
			return l
		}
	}
	return ""
}

var colour = regexp.MustCompile("\x1b\\[[0-9;]*m")

func stripColour(s string) string { return colour.ReplaceAllString(s, "") }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// interrupted is what an ended ctx makes of err.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	return err
}

// ErrInterrupted wraps the error of a Nix process stopped because its
// context ended.
var ErrInterrupted = errors.New("interrupted")
