package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

// A party of the explorer (explore_test.go) is a deployer in a process of
// its own: the test binary started again with exploreParty naming its
// settings, so that it can be killed mid-step like a CI runner, and
// interrupted like an apply (SIGINT). It deploys one node with the real
// Deployer and prints, a JSON line each, every event of the deploy and
// then its result.

// exploreParty names the file holding a party's settings.
const exploreParty = "FLEET_EXPLORE_PARTY"

// partySettings are a party's deployment.
type partySettings struct {
	Target            deploy.Target
	Holder            string
	Goal              deploy.Goal
	Keep              bool
	LockTimeout       time.Duration
	ActivationTimeout time.Duration
	ConfirmTimeout    time.Duration
	SettleTimeout     time.Duration
	Checks            []string // the verdict's commands on the node
	Reboot            deploy.RebootPolicy
	RebootTimeout     time.Duration
	BootLockInterval  time.Duration // 0: the default
	RemoteExecTimeout time.Duration
	MasterPersist     time.Duration
	KnownHostsFile    string
	ControlDir        string
	Env               []string
	// Gates are steps at whose start the party waits for the explorer's
	// word on its standard input (a line) before it acts, once each: a
	// fault planned for that moment is in place before the step's first
	// byte (a confirmation's answer lost, not the confirmation).
	Gates []deploy.StepName
}

// gateWait bounds a party's wait at a gate: an explorer that does not
// answer does not keep the party from its deploy.
const gateWait = 10 * time.Second

// partyLine is one line a party prints: an event, or its result.
type partyLine struct {
	Event  *deploy.Event  `json:",omitempty"`
	Result *deploy.Result `json:",omitempty"`
	At     time.Time
}

func init() {
	if path := os.Getenv(exploreParty); path != "" {
		os.Exit(partyMain(path))
	}
}

func partyMain(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var s partySettings
	if err := json.Unmarshal(b, &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT)
	defer stop()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	emit := func(l partyLine) {
		mu.Lock()
		defer mu.Unlock()
		l.At = time.Now()
		b, _ := json.Marshal(l)
		_, _ = out.Write(append(b, '\n'))
		_ = out.Flush()
	}
	words := make(chan struct{}, len(s.Gates))
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			words <- struct{}{}
		}
	}()
	var gated sync.Map // deploy.StepName -> bool
	log := func(e deploy.Event) {
		emit(partyLine{Event: &e})
		if e.Kind != deploy.EventStepStarted || !slices.Contains(s.Gates, e.Step) {
			return
		}
		if _, seen := gated.LoadOrStore(e.Step, true); seen {
			return
		}
		select {
		case <-words:
		case <-time.After(gateWait):
		}
	}
	d := &deploy.Deployer{
		Transport: &deploy.Transport{KnownHostsFile: s.KnownHostsFile, ControlDir: s.ControlDir,
			RemoteExecTimeout: s.RemoteExecTimeout, MasterPersist: s.MasterPersist},
		Options: deploy.Options{
			Goal: s.Goal, Keep: s.Keep, Holder: s.Holder, LockTimeout: s.LockTimeout, ActivationTimeout: s.ActivationTimeout,
			BootLockInterval: s.BootLockInterval, Reboot: s.Reboot, RebootTimeout: s.RebootTimeout,
			Verdict: deploy.VerdictSpec{ConfirmTimeout: s.ConfirmTimeout, SettleTimeout: s.SettleTimeout, Command: s.Checks},
			Env:     s.Env,
			Log:     log,
		},
	}
	r := d.Deploy(ctx, []deploy.Target{s.Target}, nil)[0]
	emit(partyLine{Result: &r})
	return 0
}

// startParty starts a party with settings s, its standard error to
// stderr; its lines arrive on lines, which is closed once its output has
// ended; a line written to gate lets it on from the gate it waits at.
func startParty(s partySettings, dir string, stderr *os.File) (cmd *exec.Cmd, _ <-chan partyLine, gate io.WriteCloser, _ error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, nil, nil, err
	}
	path := dir + "/party-" + s.Holder + ".json"
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, nil, nil, err
	}
	cmd = exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), exploreParty+"="+path)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if gate, err = cmd.StdinPipe(); err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	lines := make(chan partyLine, 256)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l partyLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				lines <- l
			}
		}
	}()
	return cmd, lines, gate, nil
}
