// Command fleet-sandbox starts a local sandbox of real SSH hosts for the demo:
// one healthy, one whose host key changed, one black-holed, one down and one
// behind a bastion, all on 127.0.0.1; and three storage nodes sharing one
// storage layout, each an sshd in a mount namespace of its own: one healthy,
// one whose uploads mount is read-only, one whose instance storage hangs
// (a hung mount: writes there block, as on a dead hard-NFS mount); and two
// NixOS-like deploy targets, web1 and web2, and as many more as
// -deploy-hosts asks, with a flake of their NixOS-like configurations
// (internal/nixtest's Repository, not built: a deployment builds them) in
// -nixos-dir. -start picks which of the fixed groups start (the five SSH
// hosts, the storage nodes, web1 and web2); -sudo-login makes the deploy
// targets let in only a user who is not root and runs root's tools through
// sudo. It needs root (mount namespaces) and Debian's nix-bin. It writes a
// Terraform variables file describing them, prints "ready", and stops
// every host on SIGINT, SIGTERM or when its standard input closes.
//
// It uses the project's one test-host harness, internal/sshtest and
// internal/nixtest.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

type host struct {
	Host               string  `json:"host"`
	Port               int     `json:"port"`
	HostKeyFingerprint string  `json:"host_key_fingerprint"`
	ProxyJump          *string `json:"proxy_jump"`
}

type vars struct {
	User           string `json:"user"`
	ClientKeyFile  string `json:"client_key_file"`
	KnownHostsFile string `json:"known_hosts_file"`
	// Left out when their hosts were not started (-start), so that a
	// configuration of what was started is not warned of values for
	// variables it does not declare.
	Hosts       map[string]host `json:"hosts,omitempty"`
	StorageRoot string          `json:"storage_root,omitempty"`
	Nodes       map[string]host `json:"nodes,omitempty"`
	// Deploy targets: NixOS-like hosts and the systems to switch them to.
	DeployTargets []deployTarget `json:"deploy_targets"`
	// NixOSDir holds the deploy targets' configurations, a flake
	// (nixosConfigurations.<target name>), and NixOSFlake is its
	// reference for fleet_nixos_systems.
	NixOSDir   string `json:"nixos_dir"`
	NixOSFlake string `json:"nixos_flake"`
}

type deployTarget struct {
	Name           string `json:"name"`
	Host           string `json:"host"`
	Port           int    `json:"port"`
	HostKey        string `json:"host_key"`
	PrivateKeyFile string `json:"private_key_file"`
	// User is the login the target lets in, and UseSudo whether it is
	// not root and reaches root's tools through sudo (-sudo-login).
	User    string `json:"user"`
	UseSudo bool   `json:"use_sudo"`
	// System and GoodSystem are store paths built at start, for a
	// configuration that passes store paths rather than reading
	// nixos_flake: System is what the target's configuration does (web2's
	// fails a unit), GoodSystem a system that switches cleanly, what to
	// set a failing host back to.
	System     string `json:"system"`
	GoodSystem string `json:"good_system"`
}

// groups are the fixed hosts -start can pick, in the order they start.
var groups = []string{"hosts", "storage", "web"}

// parseStart reads -start: groups, comma-separated, or nothing.
func parseStart(list string) (map[string]bool, error) {
	start := map[string]bool{}
	for _, g := range strings.Split(list, ",") {
		g = strings.TrimSpace(g)
		if g == "" {
			continue
		}
		if !slices.Contains(groups, g) {
			return nil, fmt.Errorf("no group %q; the groups are %s", g, strings.Join(groups, ", "))
		}
		start[g] = true
	}
	return start, nil
}

// executorHosts starts the five SSH hosts for executors and reachability.
func executorHosts(sb *sandbox, client *sshtest.Key) map[string]host {
	healthy := sshtest.StartSSHD(sb, sshtest.WithAuthorizedKeys(client))
	// The host was reinstalled: it serves a new key, the pin is the old one.
	rekeyed := sshtest.StartSSHD(sb, sshtest.WithAuthorizedKeys(client))
	oldKey := sshtest.NewKey(sb)
	blackholed := sshtest.NewServer(sb, sshtest.BlackHole)
	downHost, downPort := sshtest.ClosedPort(sb)
	behind := sshtest.StartSSHD(sb, sshtest.WithAuthorizedKeys(client))
	bastion := sshtest.NewServerWithKeys(sb, sshtest.Bastion, nil, client)
	jump := fmt.Sprintf("%s@%s", healthy.User, bastion.Addr)
	return map[string]host{
		"healthy":    {Host: healthy.Host, Port: healthy.Port, HostKeyFingerprint: healthy.HostKeys[0].Fingerprint()},
		"rekeyed":    {Host: rekeyed.Host, Port: rekeyed.Port, HostKeyFingerprint: oldKey.Fingerprint()},
		"blackholed": {Host: blackholed.Host, Port: blackholed.Port, HostKeyFingerprint: sshtest.NewKey(sb).Fingerprint()},
		"down":       {Host: downHost, Port: downPort, HostKeyFingerprint: sshtest.NewKey(sb).Fingerprint()},
		"jumped":     {Host: behind.Host, Port: behind.Port, HostKeyFingerprint: behind.HostKeys[0].Fingerprint(), ProxyJump: &jump},
	}
}

// deployLogin is how the deploy targets let the deployer in: the one
// client key, for user, through sudo when sudo is set.
type deployLogin struct {
	key     *sshtest.Key
	keyFile string
	user    string
	sudo    bool
	// faults, when set, is the directory whose files set each target's
	// link faults (see linkFaults).
	faults string
}

// target starts a NixOS-like host that lets l in, booted into first.
func (l deployLogin) target(sb *sandbox, first, name, sys, good string) deployTarget {
	opts := []nixtest.Option{nixtest.WithSSHDOptions(sshtest.WithAuthorizedKeys(l.key))}
	if l.sudo {
		opts = append(opts, nixtest.WithLoginUser(l.user))
	}
	tg := nixtest.NewTarget(sb, opts...)
	tg.Boot(sb, first)
	port := tg.Port
	if l.faults != "" {
		port = linkFaults(sb, filepath.Join(l.faults, name), tg.Gate.Addr)
	}
	return deployTarget{Name: name, Host: tg.Host, Port: port, HostKey: tg.HostKey,
		PrivateKeyFile: l.keyFile, User: tg.User, UseSudo: l.sudo, System: sys, GoodSystem: good}
}

// linkFaults puts a link whose faults a file sets in front of a deploy
// target (backend), and returns its port. The file holds one word, read
// ten times a second: stall (every connection's traffic held, both ways,
// new ones too, as a VPN that hangs), stall-open (only the connections
// open now: new ones flow), stall-up, stall-down (one way), refuse (new
// connections reset), blackhole (new connections never answered), reset
// (the open connections reset, once), or heal; no file is heal.
func linkFaults(sb *sandbox, file, backend string) int {
	link := sshtest.NewLink(sb, backend)
	stop := make(chan struct{})
	done := make(chan struct{})
	sb.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		last := ""
		for {
			b, _ := os.ReadFile(file)
			word := strings.TrimSpace(string(b))
			if word != last {
				last = word
				switch word {
				case "stall":
					link.Set(sshtest.LinkFault{Hold: [2]bool{true, true}})
				case "stall-open":
					link.Set(sshtest.LinkFault{Hold: [2]bool{true, true}, OnlyOpen: true})
				case "stall-up":
					link.Set(sshtest.LinkFault{Hold: [2]bool{true, false}})
				case "stall-down":
					link.Set(sshtest.LinkFault{Hold: [2]bool{false, true}})
				case "refuse":
					link.Set(sshtest.LinkFault{New: sshtest.NewRefuse})
				case "blackhole":
					link.Set(sshtest.LinkFault{New: sshtest.NewBlackHole})
				case "reset":
					link.ResetOpen()
				default:
					link.Heal()
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return link.Port
}

func main() {
	out := flag.String("out", "sandbox.auto.tfvars.json", "where to write the variables file")
	extra := flag.Int("deploy-hosts", 0, "NixOS-like hosts to start besides web1 and web2, named node01, node02, …")
	failing := flag.Int("failing-hosts", 0, "how many of those (the first ones) get a system whose activation fails a unit")
	delay := flag.Duration("activation-delay", 0, "how long each activation of their systems takes")
	nixosDir := flag.String("nixos-dir", "", "where to write the deploy targets' NixOS configurations (default: the sandbox's own directory, removed when it stops)")
	startFlag := flag.String("start", strings.Join(groups, ","), "which fixed hosts to start, comma-separated: hosts (the five SSH hosts for executors), storage (the storage nodes), web (web1 and web2); empty for none")
	faults := flag.String("link-faults", "", "a directory: each deploy target is reached through a link whose faults the file of its name there sets, a word each: stall, stall-open, stall-up, stall-down, refuse, blackhole, reset, heal (echo stall > DIR/web1)")
	sudoLogin := flag.Bool("sudo-login", false, "the deploy targets let in only "+sshtest.SudoUserName+", a user who is not root and may run anything through sudo without a password; their entries say use_sudo = true")
	flag.Parse()
	if *extra < 0 || *failing < 0 || *failing > *extra {
		fmt.Fprintln(os.Stderr, "fleet-sandbox: -failing-hosts must be between 0 and -deploy-hosts")
		os.Exit(2)
	}
	start, err := parseStart(*startFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-sandbox: -start:", err)
		os.Exit(2)
	}

	sb := newSandbox()
	defer sb.stop()

	client := sshtest.NewKey(sb)
	keyFile := client.WriteFile(sb, sb.TempDir())
	me, err := user.Current()
	if err != nil {
		sb.Fatalf("the current user: %v", err)
	}
	v := vars{
		User:           me.Username,
		ClientKeyFile:  keyFile,
		KnownHostsFile: filepath.Join(sb.TempDir(), "known_hosts"),
		Hosts:          map[string]host{},
		Nodes:          map[string]host{},
		DeployTargets:  []deployTarget{},
	}
	if start["hosts"] {
		v.Hosts = executorHosts(sb, client)
	}
	if start["storage"] {
		v.StorageRoot, v.Nodes = storageNodes(sb, client)
		// A storage node that is down, as the SSH host "down" is.
		downHost, downPort := sshtest.ClosedPort(sb)
		v.Nodes["sf-down"] = host{Host: downHost, Port: downPort, HostKeyFingerprint: sshtest.NewKey(sb).Fingerprint()}
	}
	login := deployLogin{key: client, keyFile: keyFile, user: me.Username, faults: *faults}
	if *faults != "" {
		if err := os.MkdirAll(*faults, 0o755); err != nil {
			sb.Fatalf("-link-faults: %v", err)
		}
	}
	if *sudoLogin {
		login.user, login.sudo = sshtest.SudoUser(sb), true
	}
	// Every deploy target takes the one client key, as every host does:
	// credentials can live in the provider block alone.
	repo := &nixtest.Repository{Dir: *nixosDir, Configurations: map[string]nixtest.Configuration{}}
	if repo.Dir == "" {
		repo.Dir = filepath.Join(sb.dir, "nixos")
	}
	if repo.Dir, err = filepath.Abs(repo.Dir); err != nil {
		sb.Fatalf("-nixos-dir: %v", err)
	}
	if start["web"] {
		v.DeployTargets = deployTargets(sb, login, repo)
	}
	v.DeployTargets = append(v.DeployTargets, fleetTargets(sb, login, repo, *extra, *failing, *delay)...)
	// Written, not built: a deployment of them builds them first.
	repo.Write(sb)
	v.NixOSDir, v.NixOSFlake = repo.Dir, "path:"+repo.Dir
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		sb.Fatalf("encoding variables: %v", err)
	}
	if err := os.WriteFile(*out, data, 0o600); err != nil {
		sb.Fatalf("writing %s: %v", *out, err)
	}
	fmt.Fprintf(os.Stderr, "fleet-sandbox: the deploy targets' NixOS configurations are in %s (edit configurations.nix or systems/<name>.json there)\n", repo.Dir)
	fmt.Println("ready")

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-stop:
	case <-stdinClosed:
	}
}

// The sandbox's systems are NixOS-like closures whose units and packages
// are store paths of their own, so that a plan's summary of each switch
// has something to say: the systems the hosts boot into run nginx 1.26.1
// and a cron job; the systems to switch to (the configurations'; system
// and good_system) run nginx 1.26.2, drop the cron job and add an app with
// its package.
func firstSystem(sb *sandbox) string {
	return nixtest.System(sb, nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed},
		Units:    map[string]string{"nginx.service": "[Service]\nExecStart=/bin/nginx-1.26.1\n", "cron.service": "[Service]\nExecStart=/bin/cron\n", "sshd.service": "[Service]\nExecStart=/bin/sshd\n"},
		Packages: map[string]int{"nginx-1.26.1": 512 << 10, "openssl-3.0.13": 1 << 20, "cron-4.1": 64 << 10}})
}

func nextSpec(b nixtest.Behaviour) nixtest.SystemSpec {
	return nixtest.SystemSpec{Behaviour: b,
		Units:    map[string]string{"nginx.service": "[Service]\nExecStart=/bin/nginx-1.26.2\n", "app.service": "[Service]\nExecStart=/bin/app\n", "sshd.service": "[Service]\nExecStart=/bin/sshd\n"},
		Packages: map[string]int{"nginx-1.26.2": 512 << 10, "openssl-3.0.13": 1 << 20, "app-1.0": 2 << 20}}
}

func nextSystem(sb *sandbox, b nixtest.Behaviour) string { return nixtest.System(sb, nextSpec(b)) }

// deployTargets starts two NixOS-like hosts, each booted into a first
// system, and adds their configurations to repo: a good one for web1, and
// for web2 one whose activation fails a unit (it is rolled back).
func deployTargets(sb *sandbox, login deployLogin, repo *nixtest.Repository) []deployTarget {
	first := firstSystem(sb)
	var out []deployTarget
	for _, t := range []struct {
		name string
		b    nixtest.Behaviour
	}{
		{"web1", nixtest.Behaviour{Kind: nixtest.Succeed}},
		{"web2", nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"nginx.service"}}},
	} {
		repo.Configurations[t.name] = nixtest.Configuration{System: nextSpec(t.b)}
		out = append(out, login.target(sb, first, t.name, nextSystem(sb, t.b), nextSystem(sb, nixtest.Behaviour{Kind: nixtest.Succeed})))
	}
	return out
}

// fleetTargets starts n more NixOS-like hosts for trying rollouts at
// scale, the first failing of them given a configuration whose system
// fails a unit.
func fleetTargets(sb *sandbox, login deployLogin, repo *nixtest.Repository, n, failing int, delay time.Duration) []deployTarget {
	if n == 0 {
		return nil
	}
	first := firstSystem(sb)
	goodB := nixtest.Behaviour{Kind: nixtest.Succeed, Delay: delay}
	badB := nixtest.Behaviour{Kind: nixtest.FailUnits, FailedUnits: []string{"app.service"}, Delay: delay}
	good, bad := nextSystem(sb, goodB), nextSystem(sb, badB)
	var out []deployTarget
	for i := range n {
		name := fmt.Sprintf("node%02d", i+1)
		sys, b := good, goodB
		if i < failing {
			sys, b = bad, badB
		}
		repo.Configurations[name] = nixtest.Configuration{System: nextSpec(b)}
		out = append(out, login.target(sb, first, name, sys, good))
	}
	return out
}

// storageNodes starts the three storage nodes. They share the layout
// root/{blobs,instances,uploads}; what differs is what each one's mount
// namespace shows at those paths.
func storageNodes(sb *sandbox, client *sshtest.Key) (string, map[string]host) {
	root := sb.TempDir()
	for _, d := range []string{"blobs", "instances", "uploads"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			sb.Fatalf("storage layout: %v", err)
		}
	}
	node := func(prepare func(ns *sshtest.MountNamespace)) host {
		ns := sshtest.NewMountNamespace(sb)
		prepare(ns)
		d := sshtest.StartSSHD(sb, sshtest.WithAuthorizedKeys(client), sshtest.WithMountNamespace(ns))
		return host{Host: d.Host, Port: d.Port, HostKeyFingerprint: d.HostKeys[0].Fingerprint()}
	}
	return root, map[string]host{
		"sf-healthy": node(func(*sshtest.MountNamespace) {}),
		"sf-readonly": node(func(ns *sshtest.MountNamespace) {
			ns.MountTmpfs(sb, filepath.Join(root, "uploads"))
			ns.RemountReadOnly(sb, filepath.Join(root, "uploads"))
		}),
		// In its namespace only, instances is a hung mount: a write
		// there blocks, as on a dead hard-NFS mount.
		"sf-hung": node(func(ns *sshtest.MountNamespace) { ns.MountHung(sb, filepath.Join(root, "instances")) }),
	}
}

// sandbox gives the harness what a test would: a scratch directory, cleanup
// on exit, and a fatal error that stops every host before exiting.
type sandbox struct {
	dir      string
	cleanups []func()
}

func newSandbox() *sandbox {
	dir, err := os.MkdirTemp("", "fleet-sandbox-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-sandbox:", err)
		os.Exit(1)
	}
	return &sandbox{dir: dir}
}

func (s *sandbox) Helper()          {}
func (s *sandbox) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }
func (s *sandbox) Fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "fleet-sandbox: "+f+"\n", a...)
	s.stop()
	os.Exit(1)
}

func (s *sandbox) TempDir() string {
	d, err := os.MkdirTemp(s.dir, "")
	if err != nil {
		s.Fatalf("temp dir: %v", err)
	}
	return d
}

func (s *sandbox) stop() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
	_ = os.RemoveAll(s.dir)
}
