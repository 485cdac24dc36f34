package deploy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/fleetops/terraform-provider-fleet/internal/nixos"
	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// Preview is what switching a node to a system will do, as a plan can
// know it without changing the host: what is copied, how the system's
// packages change, which units the switch starts, stops, restarts or
// reloads, and whether the change needs a reboot.
type Preview struct {
	Node, System string
	// Current is the system the host runs; Verified, whether a deploy
	// of the new system passed its verdict there (the host's record).
	Current  string
	Verified bool
	// What the copy sends: the closure's paths the host's store lacks.
	CopyPaths    int
	CopyBytes    int64
	ClosurePaths int
	ClosureBytes int64
	// Packages is the package-level difference between the closures,
	// when the running system's closure could be read; SizeDelta is the
	// closure's growth in bytes.
	Packages      []PackageChange
	PackagesKnown bool
	SizeDelta     int64
	// Units are the units the switch changes; UnitsFrom says how they
	// were learnt ("dry activation" or "unit files"), empty when not.
	Units     UnitChanges
	UnitsFrom string
	// Reboot names what changes that a live switch does not apply (the
	// kernel, the initrd, the kernel modules); RebootKnown says the
	// systems could be compared.
	Reboot      []string
	RebootKnown bool
	// Inhibited says the new system's switch inhibitors differ from the
	// running system's: NixOS refuses to switch to it live.
	Inhibited bool
	// Notes say what could not be learnt, and why.
	Notes []string
	// Unbuilt says this machine's store lacks the system: the apply builds
	// it (on the host with BuildOnHost), and Pending is what Nix's dry run
	// says that takes; what the copy sends and the switch changes is known
	// once it is built.
	Unbuilt     bool
	BuildOnHost bool
	Pending     nixos.Pending
}

// PackageChange is one package whose versions differ between the
// closures: Old empty when it is added, New empty when removed.
type PackageChange struct {
	Name     string
	Old, New []string
}

// UnitChanges are units by what the switch does to them.
type UnitChanges struct {
	Start, Stop, Restart, Reload []string
}

func (u UnitChanges) empty() bool {
	return len(u.Start)+len(u.Stop)+len(u.Restart)+len(u.Reload) == 0
}

// PreviewOptions say how far a preview goes.
type PreviewOptions struct {
	// DryActivate copies the closure and runs the new system's
	// switch-to-configuration dry-activate under the host's deploy lock,
	// for the units as the new system itself would change them.
	DryActivate bool
	// Derivation is the system's derivation, for a system this machine's
	// store lacks; BuildOn says where the apply builds it.
	Derivation string
	BuildOn    BuildOn
}

// Preview says what switching the session's node to system will do. It
// runs the queries of the host in one command over the session's login;
// with DryActivate it also copies the closure (harmless to the running
// system) and dry-activates it under the host's deploy lock.
func (d *Deployer) Preview(ctx context.Context, sess *Session, system string, opts PreviewOptions) (Preview, error) {
	c := sess.conn
	p := Preview{Node: c.s.Name, System: system, Current: sess.Current.System, Verified: sess.Current.Succeeded == system}
	if opts.Derivation != "" && !inStore(system) && p.Recorded() {
		// The apply records it without a build: it asks the host first
		// (Deployer.alreadyRun), and a build on the host comes after the
		// read that finds it done.
		return p, nil
	}
	if opts.Derivation != "" && !inStore(system) {
		// Not built: what the build takes, from Nix's dry run; the
		// rest is known once it is built.
		p.Unbuilt, p.BuildOnHost = true, opts.BuildOn == BuildTarget
		if p.BuildOnHost {
			// What the host's store lacks, not this machine's.
			builds, err := d.builder().HostBuilds(ctx, opts.Derivation, func(outputs []string) (map[string]bool, error) {
				return hostHas(ctx, c, outputs)
			})
			p.Pending = nixos.Pending{Build: builds}
			return p, err
		}
		pending, err := d.builder().WillBuild(ctx, opts.Derivation)
		p.Pending = pending
		return p, err
	}
	closure, sizes, err := d.localClosure(ctx, system)
	if err != nil {
		return p, err
	}
	p.ClosurePaths = len(closure)
	for _, path := range closure {
		p.ClosureBytes += sizes[path]
	}
	// The running system's closure is read here when this store has it,
	// else asked of the host with the rest.
	var oldClosure []string
	oldSizes := map[string]int64{}
	wantOld := "old"
	if cur := sess.Current.System; cur != "" {
		if paths, sz, err := d.localClosure(ctx, cur); err == nil {
			oldClosure, oldSizes, wantOld = paths, sz, "no-old"
		}
	}
	cmd := c.Command(ctx, remote(previewScript))
	cmd.Stdin = strings.NewReader(wantOld + "\n" + strings.Join(closure, "\n") + "\n")
	out, err := output(cmd)
	if err != nil {
		if ctx.Err() != nil {
			return p, fmt.Errorf("%s while the host was asked", cause(ctx))
		}
		_, msg := exitOf(err, out)
		return p, fmt.Errorf("asking the host: %s", msg)
	}
	host, err := parsePreview(out)
	if err != nil {
		return p, err
	}
	if host.current != "" {
		p.Current = host.current
	}
	// The host names the closure's paths it lacks: the copy sends those.
	p.CopyPaths = len(host.invalid)
	for _, path := range host.invalid {
		p.CopyBytes += sizes[path]
	}
	if wantOld == "old" {
		oldClosure, oldSizes = host.oldPaths, host.oldSizes
	}
	if len(oldClosure) > 0 {
		p.PackagesKnown = true
		// The systems themselves are named above, not as packages.
		p.Packages = diffPackages(without(oldClosure, p.Current), without(closure, system))
		var oldBytes int64
		for _, path := range oldClosure {
			oldBytes += oldSizes[path]
		}
		p.SizeDelta = p.ClosureBytes - oldBytes
	} else {
		p.Notes = append(p.Notes, "the running system's closure could not be read, so its packages are not compared")
	}
	newUnits := localUnits(system)
	p.Reboot, p.RebootKnown = rebootChanges(system, host.booted)
	if h := localInhibitors(system); h != "" && host.inhibitors != "" && h != host.inhibitors {
		p.Inhibited = true
	}
	if opts.DryActivate {
		// The apply's own plan, seconds after the plan's, finds the
		// answer kept (see dryActivationFresh).
		key := dryActivationKey(c, sess.Current.HostKey, p.Current, system)
		if units, ok := d.keptDryActivationOf(key); ok {
			p.Units, p.UnitsFrom = units, "dry activation"
			return p, nil
		}
		units, err := d.dryActivate(ctx, c, system)
		if err == nil {
			d.keepDryActivation(key, units)
			p.Units, p.UnitsFrom = units, "dry activation"
			return p, nil
		}
		if ctx.Err() != nil {
			return p, err
		}
		p.Notes = append(p.Notes, "the dry activation failed ("+firstLine(err.Error())+"), so the units are compared by their files")
	}
	p.Units, p.UnitsFrom = diffUnits(host.units, newUnits), "unit files"
	return p, nil
}

// previewScript answers a preview in one round trip. Its standard input
// is "old" or "no-old" (whether to list the running system's closure with
// sizes), then the new closure's paths. It prints the running system, the
// booted system's kernel, initrd and modules, the running system's units
// (name and the file they resolve to) and a digest of its switch
// inhibitors, then the closure's paths the store lacks.
// hostHas says which of paths the host's store has, asked over c.
func hostHas(ctx context.Context, c *Conn, paths []string) (map[string]bool, error) {
	cmd := c.Command(ctx, remote(`paths=$(cat); [ -z "$paths" ] || nix-store --check-validity --print-invalid $paths`))
	cmd.Stdin = strings.NewReader(strings.Join(paths, "\n") + "\n")
	out, err := output(cmd)
	if err != nil {
		_, msg := exitOf(err, out)
		return nil, fmt.Errorf("asking the host which paths its store has: %s", orNone(msg))
	}
	invalid := map[string]bool{}
	for _, p := range strings.Fields(out) {
		invalid[p] = true
	}
	has := map[string]bool{}
	for _, p := range paths {
		has[p] = !invalid[p]
	}
	return has, nil
}

const previewScript = `cur=$(readlink -f /run/current-system)
booted=$cur; [ ! -e /run/booted-system ] || booted=$(readlink -f /run/booted-system)
echo "current $cur"
for l in kernel initrd kernel-modules; do echo "booted $l $(readlink -e "$booted/$l" 2>/dev/null)"; done
for f in "$cur"/etc/systemd/system/*; do [ -f "$f" ] && echo "unit ${f##*/} $(readlink -f "$f")"; done
[ ! -f "$cur/switch-inhibitors" ] || echo "inhibitors $(sha256sum < "$cur/switch-inhibitors" | cut -d ' ' -f 1)"
read -r old
paths=$(cat)
echo invalid
if [ -n "$paths" ]; then nix-store --check-validity --print-invalid $paths || exit 1; fi
if [ "$old" = old ] && [ -n "$cur" ] && olds=$(nix-store --query --requisites "$cur" 2>/dev/null); then
echo old-paths; printf '%s\n' $olds
echo old-sizes; nix-store --query --size $olds || exit 1
fi
echo end`

// hostAnswer is what previewScript printed.
type hostAnswer struct {
	current    string
	booted     map[string]string
	units      map[string]string
	inhibitors string
	invalid    []string
	oldPaths   []string
	oldSizes   map[string]int64
}

func parsePreview(out string) (hostAnswer, error) {
	a := hostAnswer{booted: map[string]string{}, units: map[string]string{}, oldSizes: map[string]int64{}}
	section := ""
	var sizes []string
	ended := false
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch line {
		case "invalid", "old-paths", "old-sizes":
			section = line
			continue
		case "end":
			ended = true
			continue
		case "":
			continue
		}
		switch section {
		case "":
			key, rest, _ := strings.Cut(line, " ")
			switch key {
			case "current":
				a.current = rest
			case "booted":
				k, v, _ := strings.Cut(rest, " ")
				a.booted[k] = v
			case "unit":
				k, v, _ := strings.Cut(rest, " ")
				a.units[k] = v
			case "inhibitors":
				a.inhibitors = rest
			}
		case "invalid":
			a.invalid = append(a.invalid, line)
		case "old-paths":
			a.oldPaths = append(a.oldPaths, line)
		case "old-sizes":
			sizes = append(sizes, line)
		}
	}
	if !ended {
		return a, fmt.Errorf("the host's answer ended early")
	}
	if len(sizes) != len(a.oldPaths) {
		return a, fmt.Errorf("the host listed %d paths of the running system and %d sizes", len(a.oldPaths), len(sizes))
	}
	for i, s := range sizes {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return a, fmt.Errorf("the host gave the size %q", s)
		}
		a.oldSizes[a.oldPaths[i]] = n
	}
	return a, nil
}

// nixStore is the nix-store binary: beside Options.Nix when that is set.
func (d *Deployer) nixStore() string {
	if d.Options.Nix != "" {
		return filepath.Join(filepath.Dir(d.Options.Nix), "nix-store")
	}
	return "nix-store"
}

// localLines runs nix-store here and returns its lines.
func (d *Deployer) localLines(ctx context.Context, args ...string) ([]string, error) {
	cmd := command(ctx, d.nixStore(), args...)
	cmd.Env = shell.Environ(d.Options.Env...)
	out, err := output(cmd)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s while this machine's store was read", cause(ctx))
		}
		_, msg := exitOf(err, out)
		return nil, fmt.Errorf("nix-store %s: %s", args[0], orStr(msg, err.Error()))
	}
	return strings.Fields(out), nil
}

// localSizes are the NAR sizes of paths in this store.
func (d *Deployer) localSizes(ctx context.Context, paths []string) (map[string]int64, error) {
	out, err := d.localLines(ctx, append([]string{"--query", "--size"}, paths...)...)
	if err != nil {
		return nil, err
	}
	if len(out) != len(paths) {
		return nil, fmt.Errorf("nix-store --query --size gave %d sizes for %d paths", len(out), len(paths))
	}
	sizes := make(map[string]int64, len(paths))
	for i, s := range out {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("nix-store --query --size gave %q", s)
		}
		sizes[paths[i]] = n
	}
	return sizes, nil
}

// localClosure is the closure of system in this store, with the paths'
// sizes; read once per Deployer for all the nodes that ask.
func (d *Deployer) localClosure(ctx context.Context, system string) ([]string, map[string]int64, error) {
	v, _ := d.closures.LoadOrStore(system, &localClosure{})
	lc, _ := v.(*localClosure)
	lc.once.Do(func() {
		if _, err := d.localLines(ctx, "--check-validity", system); err != nil {
			lc.err = fmt.Errorf("%s is not in this machine's store: %w", system, err)
			return
		}
		if lc.paths, lc.err = d.localLines(ctx, "--query", "--requisites", system); lc.err != nil {
			lc.err = fmt.Errorf("the closure of %s: %w", system, lc.err)
			return
		}
		lc.sizes, lc.err = d.localSizes(ctx, lc.paths)
	})
	return lc.paths, lc.sizes, lc.err
}

type localClosure struct {
	once  sync.Once
	paths []string
	sizes map[string]int64
	err   error
}

// localUnits are the units of system here: name, and the file each
// resolves to.
func localUnits(system string) map[string]string {
	units := map[string]string{}
	dir := filepath.Join(system, "etc", "systemd", "system")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if target, err := filepath.EvalSymlinks(path); err == nil {
			units[e.Name()] = target
		}
	}
	return units
}

// diffUnits compares two systems' unit files: a unit whose file changes
// is restarted (or reloaded, as its unit says), a new one started when
// something wants it, a removed one stopped. A lower bound: what the
// activation itself does beyond the unit files is not seen.
func diffUnits(before, after map[string]string) UnitChanges {
	var u UnitChanges
	for name, file := range after {
		switch prev, ok := before[name]; {
		case !ok:
			u.Start = append(u.Start, name)
		case prev != file:
			u.Restart = append(u.Restart, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			u.Stop = append(u.Stop, name)
		}
	}
	sort.Strings(u.Start)
	sort.Strings(u.Restart)
	sort.Strings(u.Stop)
	return u
}

// rebootParts are what a live switch leaves as booted: a change to one
// takes effect at the next boot only.
var rebootParts = []string{"kernel", "initrd", "kernel-modules"}

// rebootChanges names the parts of system that differ from the booted
// system's; known is false when the new system has none of them (not a
// system that boots a kernel of its own, a container say).
func rebootChanges(system string, booted map[string]string) (changed []string, known bool) {
	for _, part := range rebootParts {
		target, err := filepath.EvalSymlinks(filepath.Join(system, part))
		if err != nil {
			continue
		}
		known = true
		if booted[part] != target {
			changed = append(changed, part)
		}
	}
	return changed, known
}

// localInhibitors is the digest of system's switch-inhibitors file, as
// previewScript prints the running system's; empty when it has none.
func localInhibitors(system string) string {
	b, err := os.ReadFile(filepath.Join(system, "switch-inhibitors"))
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// dryActivate copies system to the host and runs its
// switch-to-configuration dry-activate under the host's deploy lock.
func (d *Deployer) dryActivate(ctx context.Context, c *Conn, system string) (UnitChanges, error) {
	lock, _, err := d.takeLock(ctx, c, d.Options.LockTimeout, nil)
	if err != nil {
		return UnitChanges{}, err
	}
	defer lock.Release()
	if err := d.startCopy(ctx, c, Target{Settings: c.s, System: system}).wait(ctx); err != nil {
		return UnitChanges{}, err
	}
	// activation_timeout bounds it, on the host too: a dry activation
	// that hangs ends there, not only its session.
	secs := max(1, int(d.activationTimeout()/time.Second))
	actx, cancel := context.WithTimeout(ctx, d.activationTimeout()+15*time.Second)
	defer cancel()
	out, err := d.run(c.Command(actx, remote(fmt.Sprintf("timeout -k 5 %d %s/bin/switch-to-configuration dry-activate", secs, shell.Quote(system)))))
	if err != nil {
		if ctx.Err() != nil {
			return UnitChanges{}, fmt.Errorf("%s during the dry activation", cause(ctx))
		}
		exit, msg := exitOf(err, out)
		if exit == 124 || actx.Err() != nil {
			return UnitChanges{}, fmt.Errorf("switch-to-configuration dry-activate did not end within activation_timeout (%s) and was stopped", d.activationTimeout())
		}
		return UnitChanges{}, fmt.Errorf("switch-to-configuration dry-activate exited %d: %s", exit, orStr(msg, "no output"))
	}
	return parseDryActivate(out), nil
}

// parseDryActivate reads the units NixOS's dry activation names:
// "would stop the following units: a.service, b.service", and so on.
func parseDryActivate(out string) UnitChanges {
	var u UnitChanges
	lists := map[string]*[]string{"stop": &u.Stop, "start": &u.Start, "restart": &u.Restart, "reload": &u.Reload}
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "would ")
		if !ok {
			continue
		}
		verb, units, ok := strings.Cut(rest, " the following units: ")
		list := lists[verb]
		if !ok || list == nil {
			continue
		}
		for _, name := range strings.FieldsFunc(units, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
			if !slices.Contains(*list, name) {
				*list = append(*list, name)
			}
		}
	}
	return u
}

// storeName is a store path's name without its directory and hash.
func storeName(path string) string {
	base := filepath.Base(path)
	if _, name, ok := strings.Cut(base, "-"); ok {
		return name
	}
	return base
}

// splitName splits a store path's name into package name and version as
// Nix does: the version starts after the first dash that is followed by
// something other than a letter.
func splitName(name string) (pkg, version string) {
	for i := 0; i+1 < len(name); i++ {
		if name[i] == '-' && !unicode.IsLetter(rune(name[i+1])) {
			return name[:i], name[i+1:]
		}
	}
	return name, ""
}

// diffPackages compares two closures by package name and version, as
// nix store diff-closures does: packages without a version are left out.
func diffPackages(before, after []string) []PackageChange {
	versions := func(paths []string) map[string][]string {
		m := map[string][]string{}
		for _, p := range paths {
			name, v := splitName(storeName(p))
			if v == "" {
				continue
			}
			if !slices.Contains(m[name], v) {
				m[name] = append(m[name], v)
			}
		}
		for _, vs := range m {
			sort.Strings(vs)
		}
		return m
	}
	o, n := versions(before), versions(after)
	names := map[string]bool{}
	for k := range o {
		names[k] = true
	}
	for k := range n {
		names[k] = true
	}
	var out []PackageChange
	for name := range names {
		if !slices.Equal(o[name], n[name]) {
			out = append(out, PackageChange{Name: name, Old: o[name], New: n[name]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func without(paths []string, path string) []string {
	return slices.DeleteFunc(slices.Clone(paths), func(p string) bool { return p == path })
}

// Text is the preview as the plan shows it. Its lines are indented: a
// CLI wraps a diagnostic's paragraphs, not its indented lines.
func (p Preview) Text() string {
	return Heading([]Preview{p}) + ":\n" + p.Body()
}

// Heading is the title of what a plan says of previews that are Alike:
// "Node web1 will switch", "Nodes web1, web2 will switch"; nodes whose
// hosts already run their systems say so, so that a reviewer's filter for
// switches leaves them out.
func Heading(ps []Preview) string {
	if len(ps) == 0 {
		return ""
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Node
	}
	switch recorded := ps[0].Recorded(); {
	case len(ps) == 1 && recorded:
		return "Node " + names[0] + " already runs its system"
	case len(ps) == 1:
		return "Node " + names[0] + " will switch"
	case recorded:
		return "Nodes " + strings.Join(names, ", ") + " already run their systems"
	}
	return "Nodes " + strings.Join(names, ", ") + " will switch"
}

// Recorded is whether the host already runs the system after a deploy
// of it passed its verdict there: the apply records it and switches
// nothing (the plan after a failed first apply, whose replacement has no
// records, plans such nodes).
func (p Preview) Recorded() bool { return p.Current == p.System && p.Verified }

// recordedUnmeasured is a host that already runs the system, which this
// machine's store lacks: the apply builds nothing for it (the deploy asks
// the host first, and a build on the host comes after its read), so
// nothing of it is measured.
func (p Preview) recordedUnmeasured() bool { return p.Recorded() && p.ClosurePaths == 0 }

// Body is what Text says of the switch, without the node's name: its own
// lines (the systems, what is copied or built), then what the switch
// does (packages, units, reboot).
func (p Preview) Body() string {
	return strings.Join(append(p.own(), p.does()...), "\n")
}

// own are the lines of Body that are the node's own: its systems, and
// what is copied or built for it.
func (p Preview) own() []string {
	lines := []string{"  to   " + p.System}
	switch {
	case p.recordedUnmeasured():
		return append(lines, "  from the same system, which a deploy of it left there: the apply records it without building or activating it again")
	case p.Recorded():
		lines = append(lines, "  from the same system, which a deploy of it left there: the apply records it without activating it again")
	case p.Current == p.System:
		lines = append(lines, "  from the same system, which no deploy of it has judged there: the apply activates it again and judges it")
	case p.Current != "":
		lines = append(lines, "  from "+p.Current)
	}
	if p.Unbuilt {
		where := "on this machine"
		if p.BuildOnHost {
			where = "on the host (what its store lacks), once the derivations are copied there"
		}
		lines = append(lines, fmt.Sprintf("  build %s %s%s", derivations(len(p.Pending.Build)), where, storeNames(p.Pending.Build, ".drv")))
		if len(p.Pending.Fetch) > 0 {
			lines = append(lines, fmt.Sprintf("  fetch %s from a configured substituter%s", paths(len(p.Pending.Fetch)), storeNames(p.Pending.Fetch, "")))
		}
		return lines
	}
	if p.CopyPaths == 0 {
		return append(lines, fmt.Sprintf("  copy nothing: the whole closure (%s, %s) is already on the host", paths(p.ClosurePaths), Bytes(p.ClosureBytes)))
	}
	rest := "; the rest is already on the host"
	if p.CopyPaths == p.ClosurePaths {
		rest = "; the host has none of it"
	}
	return append(lines, fmt.Sprintf("  copy %s, %s (of a %s closure%s)", paths(p.CopyPaths), Bytes(p.CopyBytes), Bytes(p.ClosureBytes), rest))
}

// does are the lines of Body that say what the switch does to the host,
// which a fleet-wide change has the same for many nodes.
func (p Preview) does() []string {
	if p.recordedUnmeasured() {
		return nil // nothing measured: see own
	}
	if p.Unbuilt {
		if p.BuildOnHost {
			return []string{"  what the switch changes is known once the host has built the system"}
		}
		return []string{"  what the copy sends and the switch changes is known once the system is built (build = true on fleet_nixos_systems builds it at plan)"}
	}
	var lines []string
	if p.PackagesKnown {
		lines = append(lines, "  "+p.packagesLine())
	}
	lines = append(lines, "  "+p.unitsLine(), "  "+p.rebootLine())
	if p.Inhibited {
		lines = append(lines, "  switch inhibitors changed: NixOS refuses to switch to this system live; it takes a boot (goal = \"boot\", then a reboot)")
	}
	for _, n := range p.Notes {
		lines = append(lines, "  note: "+n)
	}
	return lines
}

// Alike is what previews share when they can be said together: nodes
// whose switches do the same to their hosts (a fleet-wide package
// upgrade, each host to a system of its own) and that either all switch
// or all are recorded without a switch.
func (p Preview) Alike() string {
	return fmt.Sprint(p.Recorded(), "\x00", strings.Join(p.does(), "\n"))
}

// Together is what a plan says of previews that are Alike, without the
// nodes' names in front: what the switches do, said once, then each
// node's own lines under its name; previews whose own lines are the same
// too (the same systems) are one Body.
func Together(ps []Preview) string {
	if len(ps) == 0 {
		return ""
	}
	first := strings.Join(ps[0].own(), "\n")
	same := true
	width := 0
	for _, p := range ps {
		same = same && strings.Join(p.own(), "\n") == first
		width = max(width, len(p.Node))
	}
	if same {
		return ps[0].Body()
	}
	lines := ps[0].does()
	for _, p := range ps {
		for i, l := range p.own() {
			name := ""
			if i == 0 {
				name = p.Node
			}
			lines = append(lines, fmt.Sprintf("  %-*s  %s", width, name, strings.TrimPrefix(l, "  ")))
		}
	}
	return strings.Join(lines, "\n")
}

func derivations(n int) string {
	if n == 1 {
		return "1 derivation"
	}
	return strconv.Itoa(n) + " derivations"
}

// storeNames is ": " and the names of store paths (without their hash,
// and suffix), at most maxListed of them; empty for none.
func storeNames(list []string, suffix string) string {
	if len(list) == 0 {
		return ""
	}
	var names []string
	for _, p := range list {
		name := strings.TrimSuffix(filepath.Base(p), suffix)
		if _, rest, ok := strings.Cut(name, "-"); ok {
			name = rest
		}
		names = append(names, name)
	}
	sort.Strings(names)
	more := ""
	if len(names) > maxListed {
		more = fmt.Sprintf(" and %d more", len(names)-maxListed)
		names = names[:maxListed]
	}
	return ": " + strings.Join(names, ", ") + more
}

// maxListed bounds the packages a plan names.
const maxListed = 12

func (p Preview) packagesLine() string {
	var changed, added, removed []string
	for _, c := range p.Packages {
		switch {
		case len(c.Old) == 0:
			added = append(added, fmt.Sprintf("+%s %s", c.Name, strings.Join(c.New, ", ")))
		case len(c.New) == 0:
			removed = append(removed, fmt.Sprintf("-%s %s", c.Name, strings.Join(c.Old, ", ")))
		default:
			changed = append(changed, fmt.Sprintf("%s %s → %s", c.Name, strings.Join(c.Old, ", "), strings.Join(c.New, ", ")))
		}
	}
	up, add, rm := len(changed), len(added), len(removed)
	items := append(append(changed, added...), removed...)
	sign := "+"
	if p.SizeDelta < 0 {
		sign = "-"
	}
	head := fmt.Sprintf("packages: %d changed, %d added, %d removed; closure %s%s", up, add, rm, sign, Bytes(abs(p.SizeDelta)))
	if len(items) == 0 {
		return head
	}
	if len(items) > maxListed {
		items = append(items[:maxListed], fmt.Sprintf("and %d more", len(items)-maxListed))
	}
	return head + ": " + strings.Join(items, "; ")
}

func (p Preview) unitsLine() string {
	label := "units (advisory, from the new system's dry activation)"
	if p.UnitsFrom != "dry activation" {
		label = "units (advisory, from the unit files; plan_dry_activate asks the new system itself)"
	}
	if p.Units.empty() {
		return label + ": none change"
	}
	var parts []string
	for _, g := range []struct {
		verb  string
		units []string
	}{{"restart", p.Units.Restart}, {"reload", p.Units.Reload}, {"start", p.Units.Start}, {"stop", p.Units.Stop}} {
		if len(g.units) > 0 {
			parts = append(parts, g.verb+" "+strings.Join(g.units, ", "))
		}
	}
	return label + ": " + strings.Join(parts, "; ")
}

func (p Preview) rebootLine() string {
	switch {
	case !p.RebootKnown:
		return "reboot required: unknown (the new system has no kernel or initrd of its own)"
	case len(p.Reboot) == 0:
		return "reboot required: no (kernel and initrd unchanged)"
	}
	return "reboot required: yes (" + strings.Join(p.Reboot, ", ") + " changed; a live switch keeps the booted ones until a reboot)"
}

func paths(n int) string {
	if n == 1 {
		return "1 store path"
	}
	return fmt.Sprintf("%d store paths", n)
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// Bytes is n in the largest binary unit that keeps it at least 1.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	for f >= unit && i < 3 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", f, []string{"KiB", "MiB", "GiB", "TiB"}[i])
}
