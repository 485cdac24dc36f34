package shell_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// Each value reaches the program as the one argument it was, through the
// real shell: spaces, quotes, $, %, globs, backslashes, newlines.
func TestQuoteThroughTheShell(t *testing.T) {
	t.Parallel()
	values := []string{"", "plain", "a b", "it's", `"double"`, "$HOME", "${HOME}", "$(id)", "`id`", "50%", "*", "a\\b", "line\nbreak", "'", "''", "-n", "~", "~/x", "a;b|c&d", "\t"}
	for _, v := range values {
		got, err := exec.Command("/bin/sh", "-c", "set -- "+shell.Quote(v)+`; printf '%s:%s' "$#" "$1"`).Output()
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if want := "1:" + v; string(got) != want {
			t.Errorf("Quote(%q) = %s reached the shell as %q, want %q", v, shell.Quote(v), got, want)
		}
	}
}

// Plain words stay as they are; everything else is quoted.
func TestQuoteLeavesPlainWords(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"-o": "-o", "/nix/store/abc-x": "/nix/store/abc-x", "%h:%p": "%h:%p", "a=b": "'a=b'", "~": "'~'", "": "''", "a b": "'a b'"} {
		if got := shell.Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// A child's environment holds what ssh and Nix need, never the
// provider's secrets or a CI runner's tokens.
// Serial: a child's environment is read from the process's.
func TestEnvironKeepsOnlyWhatChildrenNeed(t *testing.T) {
	t.Setenv("FLEET_PRIVATE_KEY", "secret")
	t.Setenv("TF_VAR_password", "secret")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("NIX_CONFIG", "substituters =")
	t.Setenv("LC_ALL", "C")
	env := strings.Join(shell.Environ("EXTRA=1"), "\n")
	for _, gone := range []string{"FLEET_PRIVATE_KEY", "TF_VAR_password", "AWS_SECRET_ACCESS_KEY"} {
		if strings.Contains(env, gone) {
			t.Errorf("%s reaches a child", gone)
		}
	}
	for _, kept := range []string{"NIX_CONFIG=substituters =", "LC_ALL=C", "PATH=", "EXTRA=1"} {
		if !strings.Contains(env, kept) {
			t.Errorf("%s does not reach a child", kept)
		}
	}
}
