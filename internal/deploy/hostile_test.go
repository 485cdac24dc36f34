package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// Trust at the edges (issue 22): a host that asks for an agent, paths that
// ssh and the shell would take apart, a verdict that takes its time, a
// host that dies mid-activation, a deployer that vanishes, streams that
// outlive their command, a deploy right after another.

// sshG is what the real ssh makes of args (ssh -G), the first value of
// each option.
func sshG(t *testing.T, args []string) map[string]string {
	t.Helper()
	raw, err := exec.Command("ssh", append([]string{"-G"}, args...)...).Output()
	if err != nil {
		t.Fatalf("ssh -G %q: %v", args, err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, _ := strings.Cut(line, " ")
		if _, seen := out[k]; !seen && k != "" {
			out[k] = v
		}
	}
	return out
}

// guardFree reports whether nothing of an earlier deploy (an activation, a
// watchdog) holds the host's guard.
func guardFree(t *testing.T, tg *nixtest.Target) bool {
	t.Helper()
	out, err := exec.Command("ssh", append(tg.SSHOptions(t), tg.Destination(), "flock -n "+deploy.GuardFile+" echo free")...).CombinedOutput()
	return err == nil && strings.TrimSpace(string(out)) == "free"
}

// The provider's key never reaches the host: an ssh_config_file that
// forwards agents (as many ~/.ssh/config do) is overruled, and a verdict
// command on the host that asks for an agent finds none.
func TestDeployForwardsNoAgentToTheHost(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (a deploy through an agent): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	seen := filepath.Join(tg.StateDir, "agent-seen")
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second,
		Command: []string{`{ echo "SSH_AUTH_SOCK=${SSH_AUTH_SOCK:-}"; ssh-add -l; } > /run/nixtest/agent-seen 2>&1; true`}}})
	// The key is the provider's agent's only: the host would see it listed
	// by name if the agent were forwarded.
	agent, err := deploy.StartKeyAgent(d.Transport.ControlDir, []ssh.Signer{tg.SSHD.ClientKey.Signer})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	d.Transport.Agent = agent.Socket
	d.Transport.ConfigFile = filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(d.Transport.ConfigFile, []byte("Host *\n  ForwardAgent yes\n  ForwardX11 yes\n  IdentitiesOnly no\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n.PrivateKeyFile, n.SSHOpts = "", []string{"Port=" + strconv.Itoa(tg.Port)}
	r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	wantPhase(t, r, deploy.PhaseSucceeded)
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatalf("the verdict command did not run: %v", err)
	}
	if got := string(b); !strings.HasPrefix(got, "SSH_AUTH_SOCK=\n") || strings.Contains(got, "fleet provider key") {
		t.Errorf("the host found an agent: %q", got)
	}
}

// An ssh_opts item that asks for forwarding is refused, naming it; what
// turns forwarding off is accepted.
func TestCheckForwarding(t *testing.T) {
	t.Parallel()
	for _, item := range []string{"ForwardAgent=yes", "forwardagent=/tmp/agent.sock", "ForwardX11=yes", "ForwardX11Trusted=yes", "LocalForward=8080 localhost:80",
		"RemoteForward=2222 localhost:22", "DynamicForward=1080", "Tunnel=yes", "ClearAllForwardings=no"} {
		if err := deploy.CheckForwarding(item); err == nil || !strings.Contains(err.Error(), item) || !strings.Contains(err.Error(), "remove the item") {
			t.Errorf("CheckForwarding(%q) = %v, want a refusal naming it", item, err)
		}
	}
	for _, item := range []string{"ForwardAgent=no", "ForwardX11=no", "Tunnel=no", "ClearAllForwardings=yes", "Port=2222", "ProxyJump=bastion"} {
		if err := deploy.CheckForwarding(item); err != nil {
			t.Errorf("CheckForwarding(%q) = %v, want ok", item, err)
		}
	}
}

// Whatever an ssh_config file says, every ssh to a node forwards nothing
// and offers only the key it was given (ssh -G, the options it would use).
func TestTransportOverrulesForwardingInTheConfigFile(t *testing.T) {
	t.Parallel()
	tr := &deploy.Transport{KnownHostsFile: filepath.Join(t.TempDir(), "kh"), ControlDir: t.TempDir()}
	tr.ConfigFile = filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(tr.ConfigFile, []byte("Host *\n  ForwardAgent yes\n  ForwardX11 yes\n  IdentitiesOnly no\n  LocalForward 8080 localhost:80\n  RemoteForward 2222 localhost:22\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "id")
	if err := os.WriteFile(key, sshtest.NewKey(t).PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Open(context.Background(), deploy.Settings{Name: "web1", Host: "web1.example.org", User: "root", PrivateKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, args := range [][]string{c.Args(), c.FreshArgs(), c.MasterArgs()} {
		got := sshG(t, args)
		for k, want := range map[string]string{"forwardagent": "no", "forwardx11": "no", "identitiesonly": "yes", "clearallforwardings": "yes"} {
			if got[k] != want {
				t.Errorf("%s = %q, want %q (args %q)", k, got[k], want, args)
			}
		}
		for _, k := range []string{"localforward", "remoteforward"} {
			if got[k] != "" {
				t.Errorf("%s = %q is still set", k, got[k])
			}
		}
	}
}

// Every path the deployment names in an ssh option reaches ssh as it is:
// spaces, quotes, backslashes, % and a lone $ (ssh -G prints what ssh
// would use); one holding ${ is refused, as ssh would expand it.
func TestPathOptionReadsBackInSSH(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"/plain/kh", "/kh dir/known_hosts", "/a\tb", `/it's "quoted"/kh`, `/back\slash\\/kh`, "/50%/kh", "/%%C/kh", "/$HOME/kh", "/a#b/kh", "/a=b/kh"} {
		opt, err := deploy.PathOption("UserKnownHostsFile", p, "")
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		if got := sshG(t, []string{"-o", opt, "x"})["userknownhostsfile"]; got != p {
			t.Errorf("%q encoded as %s reads back as %q", p, opt, got)
		}
	}
	dir := "/tmp/a b%c"
	opt, err := deploy.PathOption("ControlPath", dir+"/", "%C")
	if err != nil {
		t.Fatal(err)
	}
	if got := sshG(t, []string{"-o", opt, "x"})["controlpath"]; !strings.HasPrefix(got, dir+"/") || len(got) != len(dir)+1+40 {
		t.Errorf("ControlPath %s reads back as %q, want %s/ and the 40 hex digits of %%C", opt, got, dir)
	}
	for _, p := range []string{"/a${HOME}/kh", "/a\nb"} {
		if _, err := deploy.PathOption("UserKnownHostsFile", p, ""); err == nil {
			t.Errorf("%q was accepted", p)
		}
	}
}

// A deployment whose files live in paths with spaces and % (the key, the
// known_hosts file, TMPDIR), directly and through a jump host: each file
// is used where it is, the first-use key is written to the named file,
// and the control sockets go where nothing splits their path.
// Serial: the control directory and the copy's temporary files go in the process's TMPDIR.
func TestDeployPathsWithSpacesAndPercent(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (two deploys, one through a jump host): make test runs it")
	}
	for _, jump := range []bool{false, true} {
		t.Run("jump="+strconv.FormatBool(jump), func(t *testing.T) {
			base := t.TempDir()
			tmp := filepath.Join(base, "tmp dir %C")
			khDir := filepath.Join(base, "kh dir")
			keyDir := filepath.Join(base, "key % dir $x")
			for _, dir := range []string{tmp, khDir, keyDir} {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("TMPDIR", tmp)
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
			if strings.HasPrefix(d.Transport.ControlDir, tmp) {
				t.Errorf("the control directory %s is in a TMPDIR whose path ssh and Nix would split", d.Transport.ControlDir)
			}
			d.Transport.KnownHostsFile = filepath.Join(khDir, "known_hosts")
			key, err := os.ReadFile(tg.ClientKeyFile)
			if err != nil {
				t.Fatal(err)
			}
			n := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			n.HostKey, n.PrivateKeyFile = "", filepath.Join(keyDir, "id 1")
			if err := os.WriteFile(n.PrivateKeyFile, key, 0o600); err != nil {
				t.Fatal(err)
			}
			var bastion *sshtest.Server
			if jump {
				bastion = sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, tg.SSHD.ClientKey)
				n.SSHOpts = append(n.SSHOpts, "ProxyJump=jump@"+bastion.Addr)
			}
			r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
			wantPhase(t, r, deploy.PhaseSucceeded)
			kh, err := os.ReadFile(d.Transport.KnownHostsFile)
			if err != nil || !strings.Contains(string(kh), strings.Fields(tg.HostKey)[1]) {
				t.Errorf("the host's key is not in %s: %q, %v", d.Transport.KnownHostsFile, kh, err)
			}
			if jump && (bastion.Accepted() == 0 || !strings.Contains(string(kh), strings.Fields(bastion.HostKey.AuthorizedLine())[1])) {
				t.Errorf("the deploy did not go through the bastion, or its key is not in %s", d.Transport.KnownHostsFile)
			}
			if _, err := os.Stat(filepath.Join(base, "kh")); err == nil {
				t.Errorf("ssh split the known_hosts path: %s/kh exists", base)
			}
		})
	}
}

// A verdict that takes longer than confirm_timeout (a service warming up)
// passes, and is not undone for lateness: the watchdog's clock runs only
// while the deployer says nothing.
func TestDeployVerdictLongerThanConfirmTimeoutPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out confirm_timeout): make test runs it")
	}
	t.Parallel()
	tg, old, sys, r := one(t, nixtest.Behaviour{Kind: nixtest.Succeed},
		deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 2 * time.Second, SettleTimeout: 2 * time.Second, Command: []string{"sleep 5"}}})
	wantPhase(t, r, deploy.PhaseSucceeded, "switched")
	if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
		t.Errorf("host: current %s, boot %s; want %s (not %s)", tg.CurrentSystem(), tg.BootEntry(), sys, old)
	}
	time.Sleep(3 * time.Second) // past a watchdog's clock that ran anyway
	if tg.CurrentSystem() != sys {
		t.Errorf("the host was switched back to %s after the confirmation", tg.CurrentSystem())
	}
}

// A tcp check reaches the host the way SSH does: at the HostName the
// ssh_config file gives the node's name, through its ProxyJump (here in
// ssh_opts) or the file's ProxyCommand. The name resolves nowhere but in
// the config file, and only the bastion dials the port.
func TestDeployTCPCheckGoesTheWaySSHDoes(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (four deploys through bastions): make test runs it")
	}
	t.Parallel()
	for _, route := range []string{"ProxyJump", "ProxyCommand"} {
		t.Run(route, func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					_ = c.Close()
				}
			}()
			port := ln.Addr().(*net.TCPAddr).Port
			bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, tg.SSHD.ClientKey)
			d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second, TCP: []int{port}}})
			config := "Host web1.fleet-test.invalid\n  HostName 127.0.0.1\n"
			n := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			n.Host = "web1.fleet-test.invalid"
			via := "through jump@"
			if route == "ProxyJump" {
				n.SSHOpts = append(n.SSHOpts, "ProxyJump=jump@"+bastion.Addr)
			} else {
				_, bport, _ := net.SplitHostPort(bastion.Addr)
				config += "  ProxyCommand ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -i " + tg.ClientKeyFile + " -p " + bport + " -W %h:%p jump@127.0.0.1\n"
				via = "ProxyCommand ended"
			}
			d.Transport.ConfigFile = filepath.Join(t.TempDir(), "ssh_config")
			if err := os.WriteFile(d.Transport.ConfigFile, []byte(config), 0o600); err != nil {
				t.Fatal(err)
			}
			r := d.Deploy(context.Background(), []deploy.Target{n}, nil)[0]
			wantPhase(t, r, deploy.PhaseSucceeded)
			want := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			if dialed := bastion.Dialed(); !slices.Contains(dialed, want) {
				t.Errorf("the bastion dialled %q, not the checked port %s", dialed, want)
			}
			// A closed port fails the check, naming why, through the bastion
			// too: one held closed, which another test's server cannot take
			// as a port just closed could be.
			_, closed := sshtest.ClosedPort(t)
			shut := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second, TCP: []int{closed}}})
			shut.Transport.ConfigFile = d.Transport.ConfigFile
			m := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
			m.Host, m.SSHOpts = n.Host, n.SSHOpts
			wantPhase(t, shut.Deploy(context.Background(), []deploy.Target{m}, nil)[0], deploy.PhaseRolledBack, "tcp port "+strconv.Itoa(closed), via)
		})
	}
}

// A host that stops answering during its activation (it froze, or the
// network to it died) cannot be sent a confirmation, but its watchdog does
// not count confirm_timeout while the activation runs: once it has not
// answered for confirm_timeout and a tick, the deployer keeps naming the
// run and asks it, over new logins, what became of the run. A host that
// answers again while its activation runs, nothing decided, is back: the
// deployer waits for the activation and judges it as usual (an outage that
// ends before the activation does is no reason to switch back). One whose
// activation ended during the outage, its watchdog hearing no word for
// confirm_timeout after that, says it switched back (RolledBack, as it
// happened); one that does not answer within AskFor is recorded as not
// known (the deployer stops naming the run, so the watchdog decides), and
// a refresh once it answers settles it. The deploy waits for neither
// activation_timeout nor keepalives. A host that answers again before
// confirm_timeout is judged as usual.
func TestDeployHostThatStopsAnsweringMidActivation(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out confirm_timeout and stalls): make test runs it")
	}
	t.Parallel()
	for _, c := range []struct {
		stall, activation time.Duration
		phase             deploy.Phase
		says, notes       []string
	}{
		{time.Hour, 4 * time.Second, deploy.PhaseUnknown, []string{"stopped answering during the activate step", "could not be asked", "switches the host back to "}, nil},
		// The activation (4 s) ends 3 s into the outage: no word has
		// reached the watchdog for longer than confirm_timeout (2 s) by
		// then, and it switches back at once, whatever the deployer does.
		{6 * time.Second, 4 * time.Second, deploy.PhaseRolledBack, []string{"stopped answering during the activate step", "rolled back to "}, nil},
		// The outage (4 s) outlasts confirm_timeout and a tick, and ends
		// 4 s before the activation (9 s) does: the watchdog, waiting for
		// the activation, could not have decided, and the deploy passes.
		{4 * time.Second, 9 * time.Second, deploy.PhaseSucceeded, nil, []string{"went silent for", "answered again"}},
		{500 * time.Millisecond, 4 * time.Second, deploy.PhaseSucceeded, nil, nil},
	} {
		t.Run(fmt.Sprintf("stall=%s,activation=%s", c.stall, c.activation), func(t *testing.T) {
			t.Parallel()
			tg := nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, old)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed, Delay: c.activation})
			opts := deploy.Options{ActivationTimeout: 2 * time.Minute, Verdict: deploy.VerdictSpec{ConfirmTimeout: 2 * time.Second, SettleTimeout: 2 * time.Second}}
			d := deployer(t, opts)
			log := d.Options.Log
			frozen := make(chan time.Time, 1)
			gaveUp := make(chan time.Time, 1)
			var mu sync.Mutex
			var notes []string
			d.Options.Log = func(e deploy.Event) {
				log(e)
				if e.Kind == deploy.EventNote {
					mu.Lock()
					notes = append(notes, e.Message)
					mu.Unlock()
				}
				if e.Kind == deploy.EventNote && strings.Contains(e.Message, "the host answered no word") {
					select {
					case gaveUp <- time.Now():
					default:
					}
				}
				if e.Kind == deploy.EventStepStarted && e.Step == deploy.StepActivate {
					time.AfterFunc(time.Second, func() {
						tg.CutSSH(t, nixtest.CutBlackHole)
						tg.Gate.Stall(true)
						frozen <- time.Now()
						time.AfterFunc(c.stall, func() { tg.Gate.Stall(false); tg.RestoreSSH(t) })
					})
				}
			}
			t.Cleanup(func() { tg.Gate.Stall(false) })
			r := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
			var took time.Duration
			var frozeAt time.Time
			select {
			case frozeAt = <-frozen:
				took = time.Since(frozeAt)
			default:
				t.Fatalf("the host was never frozen: %+v", r)
			}
			wantPhase(t, r, c.phase, c.says...)
			mu.Lock()
			said := strings.Join(notes, " | ")
			mu.Unlock()
			for _, w := range c.notes {
				if !strings.Contains(said, w) {
					t.Errorf("the deploy's notes (%s) do not say %q", said, w)
				}
			}
			if c.phase == deploy.PhaseSucceeded {
				if tg.CurrentSystem() != sys || tg.BootEntry() != sys {
					t.Errorf("host: current %s, boot %s; want %s", tg.CurrentSystem(), tg.BootEntry(), sys)
				}
				return
			}
			// Given up on confirm_timeout and a tick of the watchdog's
			// clock after its last answer (a word before the freeze), with
			// a few seconds for a busy machine: the watchdog may have
			// decided by then (once the activation ended), no sooner.
			givesUp := opts.Verdict.ConfirmTimeout + time.Second
			select {
			case at := <-gaveUp:
				if after := at.Sub(frozeAt); after < givesUp-time.Second || after > givesUp+4*time.Second {
					t.Errorf("the deploy gave up on the host %s after it froze, want about confirm_timeout and a second (%s)", after, givesUp)
				}
			default:
				t.Errorf("the deploy never said it gave up on the host")
			}
			// confirm_timeout and a tick, then asking for AskFor (each ask
			// up to ConnectTimeout): far from activation_timeout.
			if took > opts.ActivationTimeout/4 {
				t.Errorf("the deploy ended %s after the host froze, want well within activation_timeout (%s)", took, opts.ActivationTimeout)
			}
			tg.Gate.Stall(false)
			tg.RestoreSSH(t)
			deadline := time.Now().Add(20 * time.Second)
			for tg.CurrentSystem() != old && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			if tg.CurrentSystem() != old {
				t.Errorf("the host did not switch itself back: it runs %s, want %s", tg.CurrentSystem(), old)
			}
			// A refresh settles what the deploy could not know.
			cur, err := readOnceBack(t, d, targetOf(tg, "web1", sys).Settings)
			if err != nil {
				t.Fatal(err)
			}
			if phase, msg := deploy.Settle(deploy.GoalSwitch, sys, r.PreviousSystem, cur); phase != deploy.PhaseRolledBack {
				t.Errorf("settled by a refresh: %s, %s; want RolledBack", phase, msg)
			}
		})
	}
}

// A refresh's read has a deadline of its own: a host that takes the login
// and then hangs (here its readlink never returns) holds the read, and
// the probe slot it takes, for ConnectTimeout and remote_exec_timeout, not
// for ever.
func TestReadCurrentHasADeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out remote_exec_timeout): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	if err := os.WriteFile(filepath.Join(tg.StateDir, "bin", "readlink"), []byte("#!/bin/sh\nexec sleep 3601\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := deployer(t, deploy.Options{})
	d.Transport.RemoteExecTimeout = 5 * time.Second
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := d.ReadCurrent(context.Background(), targetOf(tg, "web1", "").Settings)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "did not answer within") {
			t.Errorf("ReadCurrent = %v, want the deadline named", err)
		}
		if took := time.Since(start); took < 4*time.Second || took > 40*time.Second {
			t.Errorf("the read ended after %s, want about ConnectTimeout and remote_exec_timeout (15 s)", took)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the read of a hung host did not end in 90 s")
	}
}

// A deployer that vanished while it held a host's deploy lock (its path
// to the host stalls here: the connection stays open, as when its machine
// or the network died and TCP has not noticed) loses the lock once the
// host has heard nothing from it for remote_exec_timeout: the next
// deployment of the host (from elsewhere: straight to its sshd) waits
// that long, not for ever.
func TestDeployLockOfAVanishedDeployerEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out remote_exec_timeout): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	tg.Boot(t, old)
	gone := deployer(t, deploy.Options{Holder: "the deployer that vanished"})
	gone.Transport.RemoteExecTimeout = 5 * time.Second
	release, err := gone.HoldLock(context.Background(), targetOf(tg, "web1", "").Settings)
	if err != nil {
		t.Fatal(err)
	}
	tg.Gate.Stall(true)
	defer release()
	defer tg.Gate.Stall(false)
	opts := deploy.Options{LockTimeout: time.Minute, Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}}
	sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	n := targetOf(tg, "web1", sys)
	_, port, _ := net.SplitHostPort(tg.SSHD.Addr)
	n.SSHOpts = []string{"Port=" + port, "IdentitiesOnly=yes"}
	start := time.Now()
	r := deployer(t, opts).Deploy(context.Background(), []deploy.Target{n}, nil)[0]
	took := time.Since(start)
	wantPhase(t, r, deploy.PhaseSucceeded)
	if took > opts.LockTimeout/2 {
		t.Errorf("the deploy took %s waiting for a lock whose holder vanished, want about remote_exec_timeout (5 s)", took)
	}
	if tg.CurrentSystem() != sys {
		t.Errorf("the host runs %s, want %s", tg.CurrentSystem(), sys)
	}
}

// A command's outcome is its exit status and what it printed, not how
// long something else holds its streams open: here a process it leaves
// behind, as a master connection does with the streams of a command run
// over it.
func TestCaptureOfACommandWhoseStreamsOutliveIt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		script string
		exit   int
	}{{"echo out; echo err >&2; sleep 3 & exit 0", 0}, {"echo out; echo err >&2; sleep 3 & exit 3", 3}} {
		start := time.Now()
		stdout, stderr, err := deploy.Capture(exec.Command("/bin/sh", "-c", c.script), false)
		took := time.Since(start)
		var ee *exec.ExitError
		switch {
		case c.exit == 0 && err != nil, c.exit != 0 && (!errors.As(err, &ee) || ee.ExitCode() != c.exit):
			t.Errorf("%q: %v, want exit %d", c.script, err, c.exit)
		case stdout != "out\n" || stderr != "err\n":
			t.Errorf("%q printed %q, %q", c.script, stdout, stderr)
		case took > 2*time.Second:
			t.Errorf("%q took %s: the streams held open were waited for", c.script, took)
		}
	}
}

// A copy whose streams outlive nix-copy-closure (a process left holding
// them) succeeds: under load a master connection holds them the same way.
func TestDeployCopyWhoseStreamsOutliveItSucceeds(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	d := deployer(t, deploy.Options{NixCopyClosure: copyWrapper(t, "( sleep 3 ) &"), Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	wantPhase(t, d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))}, nil)[0], deploy.PhaseSucceeded)
}

// A node is done when its host has let go of everything the deploy took:
// right after a deploy, the host's guard is free, and a deploy of the
// host that follows at once (no lock_timeout) goes ahead, every time.
func TestDeployRightAfterAnotherFindsTheHostFree(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (four deploys): make test runs it")
	}
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	for i := range 4 {
		sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
		r := d.Deploy(context.Background(), []deploy.Target{targetOf(tg, "web1", sys)}, nil)[0]
		wantPhase(t, r, deploy.PhaseSucceeded, "switched")
		if !guardFree(t, tg) {
			t.Fatalf("deploy %d: its activation or watchdog still holds the host's guard after the node was done", i+1)
		}
	}
}

// Issue 22 trial: a host that accepts every variable (AcceptEnv *) and an
// ssh_config_file that sends them all (SendEnv *), in a directory whose
// path holds a space and naming the host by an alias: the host gets none
// of the provider's secrets or a CI runner's tokens, and the copy, whose
// ssh reads the config file too, reaches the alias.
// Serial: the secrets are in the process environment, where a provider finds them.
func TestDeploySendsTheHostNoSecretsAndReadsAConfigFileWithASpace(t *testing.T) {
	for k, v := range map[string]string{"FLEET_PRIVATE_KEY": "-----BEGIN fleet secret", "TF_VAR_db_password": "hunter2", "AWS_SECRET_ACCESS_KEY": "aws-secret"} {
		t.Setenv(k, v)
	}
	tg := nixtest.NewTarget(t, nixtest.WithSSHDOptions(sshtest.WithConfigLines("AcceptEnv *")))
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second,
		Command: []string{"env > /run/nixtest/env-seen"}}})
	dir := filepath.Join(t.TempDir(), "ssh config dir")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d.Transport.ConfigFile = filepath.Join(dir, "ssh config")
	if err := os.WriteFile(d.Transport.ConfigFile, []byte(fmt.Sprintf("Host web1.alias\n  HostName 127.0.0.1\n  Port %d\n  SendEnv *\n", tg.Port)), 0o600); err != nil {
		t.Fatal(err)
	}
	n := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n.Host, n.SSHOpts = "web1.alias", []string{"IdentitiesOnly=yes"}
	wantPhase(t, d.Deploy(context.Background(), []deploy.Target{n}, nil)[0], deploy.PhaseSucceeded)
	env, err := os.ReadFile(filepath.Join(tg.StateDir, "env-seen"))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"FLEET_PRIVATE_KEY", "fleet secret", "hunter2", "aws-secret"} {
		if strings.Contains(string(env), secret) {
			t.Errorf("the host got %q in its environment:\n%s", secret, env)
		}
	}
}

// Issue 22 trial: the provider's own agent (a key it holds in memory) is
// given to ssh as IdentityAgent, never in the environment: a config
// file's ProxyCommand, whose ssh reads its own configuration (ForwardAgent
// yes, say), finds no agent of the provider's, and none of its secrets.
// Serial: the secret and the agent are the process environment's.
func TestDeployProxyCommandSeesNoAgentOfTheProvider(t *testing.T) {
	t.Setenv("FLEET_PRIVATE_KEY", "-----BEGIN fleet secret")
	t.Setenv("SSH_AUTH_SOCK", "")
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	bastion := sshtest.NewServerWithKeys(t, sshtest.Bastion, nil, tg.SSHD.ClientKey)
	_, bport, _ := net.SplitHostPort(bastion.Addr)
	d := deployer(t, deploy.Options{Verdict: deploy.VerdictSpec{ConfirmTimeout: 3 * time.Second, SettleTimeout: 2 * time.Second}})
	agent, err := deploy.StartKeyAgent(d.Transport.ControlDir, []ssh.Signer{tg.SSHD.ClientKey.Signer})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	d.Transport.Agent = agent.Socket
	seen := filepath.Join(t.TempDir(), "proxy-env")
	d.Transport.ConfigFile = filepath.Join(t.TempDir(), "ssh_config")
	proxy := fmt.Sprintf("sh -c 'env > %s; exec ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes -i %s -p %s -W %%h:%%p jump@127.0.0.1'",
		seen, tg.ClientKeyFile, bport)
	if err := os.WriteFile(d.Transport.ConfigFile, []byte("Host 127.0.0.1\n  ProxyCommand "+proxy+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := targetOf(tg, "web1", nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	n.PrivateKeyFile, n.SSHOpts = "", []string{"Port=" + strconv.Itoa(tg.Port)}
	wantPhase(t, d.Deploy(context.Background(), []deploy.Target{n}, nil)[0], deploy.PhaseSucceeded)
	if bastion.Accepted() == 0 {
		t.Fatal("the deploy did not go through the ProxyCommand")
	}
	env, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), agent.Socket) || strings.Contains(string(env), "fleet secret") {
		t.Errorf("the ProxyCommand found the provider's agent or secrets:\n%s", env)
	}
}
