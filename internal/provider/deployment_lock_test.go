package provider_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// startPostgres runs a throwaway PostgreSQL on a free loopback port, as the
// postgres user (initdb refuses root), and stops it when the test ends.
func startPostgres(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"initdb", "pg_ctl", "runuser"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the machine image provides PostgreSQL (initdb, pg_ctl); runuser is in util-linux", tool)
		}
	}
	dir, err := os.MkdirTemp("", "fleet-pg-") //nolint:usetesting // the postgres user must reach it, and the socket path must be short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if out, err := exec.Command("chown", "postgres:", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown %s: %v\n%s", dir, err, out)
	}
	// A loopback address of its own: no other test picks its ports there,
	// so the port stays free until PostgreSQL binds it.
	host := sshtest.PrivateLoopback(t)
	port := sshtest.ClosedPortOn(t, host)
	data := filepath.Join(dir, "data")
	as := func(args ...string) {
		t.Helper()
		out, err := exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	as("initdb", "-D", data, "-U", "postgres", "--auth=trust")
	as("pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=%s", port, dir, host), "start")
	t.Cleanup(func() {
		_ = exec.Command("runuser", "-u", "postgres", "--", "pg_ctl", "-D", data, "-m", "immediate", "stop").Run()
	})
	return fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=disable", host, port)
}

// Two applies from two states deploy the same host at once: the host's
// deploy lock lets one switch it; the other waits its lock_timeout and
// fails that node naming the holder. With the pg backend of a real
// PostgreSQL (two schemas: two states) and with two local states.
func TestDeploymentTwoAppliesAtOnce(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.AlternateCLIs(t) {
		for _, backend := range []string{"pg", "local"} {
			t.Run(cli.Name+"/"+backend, func(t *testing.T) {
				t.Parallel()
				conn := ""
				if backend == "pg" {
					conn = startPostgres(t)
				}
				tg := nixtest.NewTarget(t)
				old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
				tg.Boot(t, old)
				slow := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Hang})
				next := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
				session := func(name, system, extra string) *acctest.Session {
					s := acctest.NewSession(t, cli, server())
					block := ""
					if conn != "" {
						block = fmt.Sprintf("terraform {\n  backend \"pg\" {\n    conn_str    = %q\n    schema_name = %q\n  }\n}\n", conn, name)
					}
					s.WriteConfig(block)
					s.Run("init", "-input=false")
					// Both states exist before the race: the pg backend locks
					// workspace creation across schemas.
					s.Run("apply", "-auto-approve", "-input=false")
					s.WriteConfig(block + deploymentConfig([]*nixtest.Target{tg}, []string{system}, extra))
					return s
				}
				// The first holds the lock for its activation_timeout: long
				// enough that the second's plan, on a busy machine, reaches
				// the lock before it is let go (8 s was seen not to be).
				first := session("first", slow, `  activation_timeout = "45s"`+"\n")
				second := session("second", next, `  lock_timeout = "1s"`+"\n")
				firstDone := make(chan error, 1)
				go func() {
					_, _, err := first.Try("apply", "-auto-approve", "-input=false") // fails: the hung activation
					firstDone <- err
				}()
				// The first holds the lock once the host names it as holder.
				if !waitUntil(func() bool { return tg.Exists(deploy.HolderFile) }, time.Minute) {
					t.Fatalf("the first apply did not take the host's deploy lock within a minute")
				}
				outSecond, errOut, code := second.ExitCode("apply", "-auto-approve", "-input=false", "-no-color")
				errOut = outSecond + errOut
				if err := <-firstDone; err == nil {
					t.Errorf("the first apply, whose activation hangs past activation_timeout, succeeded")
				}
				host, _ := os.Hostname()
				if code == 0 || !strings.Contains(errOut, "deploy lock is held by fleet_ssh_deployment") || !strings.Contains(errOut, "run on "+host+" in ") ||
					!strings.Contains(errOut, "lock_timeout (1s)") {
					t.Errorf("the second apply (exit %d) did not fail naming the holder:\n%s", code, errOut)
				}
				if strings.Contains(strings.Join(tg.Calls(), " "), next) {
					t.Errorf("the second apply switched the host while the first held it: %v", tg.Calls())
				}
				// Once the first is done, the second goes through.
				second.Run("apply", "-auto-approve", "-input=false")
				if tg.CurrentSystem() != next || tg.BootEntry() != next {
					t.Errorf("after the first finished: current %s, boot %s", tg.CurrentSystem(), tg.BootEntry())
				}
			})
		}
	}
}

// waitUntil asks cond every 50 ms until it holds (true) or limit passes
// (false): tests order themselves by what they observe, never by sleeping
// a guessed time.
func waitUntil(cond func() bool, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}
