package acctest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"
)

// Session runs CLI commands in one working directory against this provider,
// for what terraform-plugin-testing cannot observe: warning diagnostics
// (from `plan -json`), raw state files and TF_LOG output. The provider is
// either served in-process (reattach) or a built binary (dev_overrides).
type Session struct {
	t   testing.TB
	CLI CLI
	Dir string
	env []string
	// commands counts the CLI commands the session has run, so that a
	// provider it serves in-process can tell one command from the next.
	commands atomic.Int64
}

// Factory makes the provider server a session serves in-process. run
// names the session's command being run at the moment it is called, as
// a provider's parent process names its command outside a test
// (provider.WithRunID); each session counts its own, since tests run in
// parallel.
type Factory func(run func() string) (tfprotov6.ProviderServer, error)

// NewSession starts a session whose provider is served from this process by
// factory for the session's lifetime.
func NewSession(t testing.TB, cli CLI, factory Factory) *Session {
	t.Helper()
	s := newSession(t, cli)
	server, err := factory(s.currentCommand)
	if err != nil {
		t.Fatalf("provider factory: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	configCh := make(chan *plugin.ReattachConfig)
	closeCh := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- tf6server.Serve(cli.ProviderAddress(), func() tfprotov6.ProviderServer { return server },
			tf6server.WithDebug(ctx, configCh, closeCh),
			tf6server.WithoutLogStderrOverride(),
			// Provider logs follow TF_LOG / TF_ACC_LOG_PATH, silent by default.
			tf6server.WithLoggingSink(sinkT{t}),
			tf6server.WithGoPluginLogger(hclog.NewNullLogger()),
		)
	}()
	var cfg *plugin.ReattachConfig
	select {
	case cfg = <-configCh:
	case err := <-served:
		cancel()
		t.Fatalf("serving the provider: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("the provider did not start serving within 30s")
	}
	t.Cleanup(func() {
		cancel()
		<-closeCh
		if err := <-served; err != nil {
			t.Errorf("serving the provider: %v", err)
		}
	})
	// The server answers for the address a configuration without
	// required_providers gives it and for the published one
	// (fleetops/fleet), which the examples name.
	attach := map[string]any{
		"Protocol": cfg.Protocol, "ProtocolVersion": cfg.ProtocolVersion, "Pid": cfg.Pid, "Test": cfg.Test,
		"Addr": map[string]string{"Network": cfg.Addr.Network(), "String": cfg.Addr.String()},
	}
	reattach, err := json.Marshal(map[string]any{cli.ProviderAddress(): attach, cli.Host + "/fleetops/fleet": attach})
	if err != nil {
		t.Fatal(err)
	}
	s.env = append(s.env, "TF_REATTACH_PROVIDERS="+string(reattach))
	return s
}

// NewBinarySession starts a session that runs the provider binary at path
// through a CLI configuration with dev_overrides, as an operator's machine
// would run a release. WithProviderBinary adds other providers the same way.
func NewBinarySession(t testing.TB, cli CLI, binary string, opts ...BinaryOption) *Session {
	t.Helper()
	s := newSession(t, cli)
	rc := filepath.Join(t.TempDir(), "cli.tfrc")
	// The address of a configuration without required_providers, the
	// published one (fleetops/fleet), and the published one written with
	// Terraform's registry host (which OpenTofu takes as it is) resolve to
	// the binary.
	dir := filepath.Dir(binary)
	overrides := fmt.Sprintf("    %q = %q\n    %q = %q\n", cli.ProviderAddress(), dir, cli.Host+"/fleetops/fleet", dir)
	if cli.Host != "registry.terraform.io" {
		overrides += fmt.Sprintf("    %q = %q\n", "registry.terraform.io/fleetops/fleet", dir)
	}
	for _, o := range opts {
		overrides += fmt.Sprintf("    %q = %q\n", cli.Host+"/"+o.source, filepath.Dir(o.binary))
	}
	conf := "provider_installation {\n  dev_overrides {\n" + overrides + "  }\n  direct {}\n}\n"
	if err := os.WriteFile(rc, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s.env = append(s.env, "TF_CLI_CONFIG_FILE="+rc)
	return s
}

// BinaryOption adds a provider to a NewBinarySession.
type BinaryOption struct{ source, binary string }

// WithProviderBinary makes the session's CLI run binary for the provider of
// source ("namespace/type", such as "hashicorp/time", on the CLI's registry
// host) through dev_overrides, as it runs this provider: no init, no
// download. binary must be named terraform-provider-<type>.
func WithProviderBinary(source, binary string) BinaryOption {
	return BinaryOption{source: source, binary: binary}
}

// NewPlainSession starts a session that overrides nothing: no reattached
// provider, no dev_overrides, an empty CLI configuration. The CLI installs
// providers as it does on an operator's machine (from the implicit local
// plugin directories under HOME, then the registry), for tests of how the
// provider is installed.
func NewPlainSession(t *testing.T, cli CLI) *Session {
	t.Helper()
	return newSession(t, cli)
}

func newSession(t testing.TB, cli CLI) *Session {
	return &Session{t: t, CLI: cli, Dir: t.TempDir(), env: []string{
		"CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "TF_INPUT=0",
		"TF_PLUGIN_CACHE_DIR=", "TF_CLI_CONFIG_FILE=" + emptyCLIConfig(t),
	}}
}

// Setenv adds an environment variable to every later command.
func (s *Session) Setenv(key, value string) { s.env = append(s.env, key+"="+value) }

// WriteConfig replaces the session's configuration.
func (s *Session) WriteConfig(hcl string) {
	s.t.Helper()
	if err := os.WriteFile(filepath.Join(s.Dir, "main.tf"), []byte(hcl), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// Run runs the CLI with args and returns its stdout and stderr, failing the
// test when the command fails.
func (s *Session) Run(args ...string) (stdout, stderr string) {
	s.t.Helper()
	stdout, stderr, err := s.Try(args...)
	if err != nil {
		s.t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", s.CLI.Name, strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout, stderr
}

// currentCommand names the CLI command the session is running now.
func (s *Session) currentCommand() string {
	return "command:" + strconv.FormatInt(s.commands.Load(), 10)
}

// Try runs the CLI with args and returns what it printed and how it ended.
func (s *Session) Try(args ...string) (stdout, stderr string, err error) {
	s.commands.Add(1)
	cmd := exec.Command(s.CLI.Path, args...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err = cmd.Run()
	s.logTime(cmd, start, args)
	return out.String(), errOut.String(), err
}

// EnvCommandTimes, set to 1, logs each CLI command's wall time and the CPU
// it and the processes it waited for used (the provider binary's among
// them), to see where an acceptance test's time goes (go test -v).
const EnvCommandTimes = "FLEET_ACC_COMMAND_TIMES"

func (s *Session) logTime(cmd *exec.Cmd, start time.Time, args []string) {
	if os.Getenv(EnvCommandTimes) != "1" || cmd.ProcessState == nil {
		return
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	s.t.Logf("%s %s: %.2f s, CPU %.2f s", s.CLI.Name, strings.Join(args, " "), time.Since(start).Seconds(), cpu.Seconds())
}

// Interrupt runs the CLI with args in a process group of its own and, after
// a while, sends SIGINT to the whole group, as Ctrl-C in a terminal does:
// the CLI and the provider processes it started both get it. It returns
// how long the command went on after the interrupt.
func (s *Session) Interrupt(after time.Duration, args ...string) (stdout, stderr string, took time.Duration) {
	s.t.Helper()
	start := time.Now()
	return s.InterruptWhen(func() bool { return time.Since(start) >= after }, args...)
}

// InterruptWhen is Interrupt at the moment ready first reports true (it is
// asked every 50 ms while the command runs): tests interrupt on what they
// observe, never after a guessed time. A command that ends before that
// fails the test.
func (s *Session) InterruptWhen(ready func() bool, args ...string) (stdout, stderr string, took time.Duration) {
	s.t.Helper()
	s.commands.Add(1)
	cmd := exec.Command(s.CLI.Path, args...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("%s %s: %v", s.CLI.Name, strings.Join(args, " "), err)
	}
	done := make(chan struct{})
	sent := make(chan time.Time, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				sent <- time.Time{}
				return
			case <-tick.C:
				if ready() {
					at := time.Now()
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
					sent <- at
					return
				}
			}
		}
	}()
	_ = cmd.Wait() // an interrupted command exits non-zero
	ended := time.Now()
	close(done)
	at := <-sent
	if at.IsZero() {
		s.t.Fatalf("%s %s ended before it was interrupted:\n%s\n%s", s.CLI.Name, strings.Join(args, " "), out.String(), errOut.String())
	}
	return out.String(), errOut.String(), ended.Sub(at)
}

// ExitCode runs the CLI with args and returns its exit code, failing the
// test when the command could not run at all. `plan -detailed-exitcode`
// exits 0 for no changes, 2 for changes and 1 for an error.
func (s *Session) ExitCode(args ...string) (stdout, stderr string, code int) {
	s.t.Helper()
	stdout, stderr, err := s.Try(args...)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout, stderr, 0
	case errors.As(err, &exit):
		return stdout, stderr, exit.ExitCode()
	}
	s.t.Fatalf("%s %s: %v", s.CLI.Name, strings.Join(args, " "), err)
	return stdout, stderr, -1
}

// WantNoChanges fails the test unless a plan with args finds nothing to
// change: after convergence a plan must be empty.
func (s *Session) WantNoChanges(args ...string) {
	s.t.Helper()
	stdout, stderr, code := s.ExitCode(append([]string{"plan", "-detailed-exitcode", "-input=false", "-no-color"}, args...)...)
	if code != 0 {
		s.t.Fatalf("%s plan -detailed-exitcode %s exited %d, want 0 (no changes):\n%s\n%s", s.CLI.Name, strings.Join(args, " "), code, stdout, stderr)
	}
}

// Diagnostic is one diagnostic of a machine-readable (-json) CLI run.
type Diagnostic struct {
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail"`
	Address  string `json:"address"`
}

// Diagnostics extracts the diagnostics from the output of a -json command.
func Diagnostics(t testing.TB, jsonLines string) []Diagnostic {
	t.Helper()
	var out []Diagnostic
	sc := bufio.NewScanner(strings.NewReader(jsonLines))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var line struct {
			Type       string     `json:"type"`
			Diagnostic Diagnostic `json:"diagnostic"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("not a JSON UI line: %q: %v", sc.Text(), err)
		}
		if line.Type == "diagnostic" {
			out = append(out, line.Diagnostic)
		}
	}
	return out
}

// State returns the raw local state file.
func (s *Session) State() []byte {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Dir, "terraform.tfstate"))
	if err != nil {
		s.t.Fatalf("reading state: %v", err)
	}
	return b
}

// Values returns the attribute values of the resource at addr in the
// current state, as `show -json` prints them, failing when it is absent.
func (s *Session) Values(addr string) map[string]any {
	s.t.Helper()
	stdout, _ := s.Run("show", "-json")
	var shown struct {
		Values struct {
			RootModule struct {
				Resources []struct {
					Address string         `json:"address"`
					Values  map[string]any `json:"values"`
				} `json:"resources"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(stdout), &shown); err != nil {
		s.t.Fatalf("show -json: %v\n%s", err, stdout)
	}
	for _, r := range shown.Values.RootModule.Resources {
		if r.Address == addr {
			return r.Values
		}
	}
	s.t.Fatalf("%s is not in the state", addr)
	return nil
}

// Validate runs `validate -json` and returns whether the configuration is
// valid and the diagnostics, failing the test when the output is not the
// JSON validate prints.
func (s *Session) Validate() (valid bool, diags []Diagnostic) {
	s.t.Helper()
	out, stderr, err := s.Try("validate", "-json")
	var result struct {
		Valid       bool         `json:"valid"`
		Diagnostics []Diagnostic `json:"diagnostics"`
	}
	if jerr := json.Unmarshal([]byte(out), &result); jerr != nil {
		s.t.Fatalf("%s validate -json: %v (%v)\n%s\n%s", s.CLI.Name, jerr, err, out, stderr)
	}
	return result.Valid, result.Diagnostics
}

// Command is name run with args in the session's directory and
// environment, as a job an operator scripts around the CLI would run.
func (s *Session) Command(name string, args ...string) *exec.Cmd {
	s.commands.Add(1)
	cmd := exec.Command(name, args...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.env...)
	return cmd
}

// sinkT is a testing.TB as the logging sink takes it: benchmarks serve
// the provider in-process too, and they cannot run in parallel.
type sinkT struct{ testing.TB }

func (sinkT) Parallel() {}
