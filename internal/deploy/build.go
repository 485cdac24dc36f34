package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/fleetops/terraform-provider-fleet/internal/nixos"
	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// localBuilds are a rollout's builds on this machine: one nixos.Build of
// every system its nodes need that this machine's store lacks, started
// with the rollout, so that Nix's own parallelism, its remote builders and
// the dependencies the systems share serve the whole rollout; each node
// waits for its own system only.
type localBuilds struct {
	build *nixos.Build
	err   error           // why the build could not start
	drvs  map[string]bool // the derivations it builds
	// missing are derivations this machine's store lacks too: the plan
	// was made on another machine.
	missing map[string]bool
	// outputs are what each derivation it builds makes, for the nodes
	// whose system is not one of them.
	outputs map[string][]string
	// runs are the nodes whose hosts ran their systems, after a passing
	// verdict, when the rollout began: not built (alreadyRun).
	runs map[string]bool
}

// hostRan reports whether n's host ran its system when the rollout began,
// which is why this machine did not build it.
func (bs *localBuilds) hostRan(n Target) bool {
	return bs != nil && bs.runs[n.Name] && !bs.drvs[n.Derivation]
}

// alreadyRun asks the hosts of the nodes no record speaks of, whose
// systems this machine would build, what they run, one login after the
// other (as the rollout's own logins come): those that run their system
// after a passing verdict are recorded by the rollout (its read finds them
// done) and need no build. A host that cannot be asked now is built for.
func (d *Deployer) alreadyRun(ctx context.Context, nodes []Target) map[string]bool {
	runs := map[string]bool{}
	if d.Options.Goal != GoalSwitch && d.Options.Goal != GoalTest {
		return runs // only these record a host that runs the system (readStep)
	}
	for _, n := range nodes {
		if !n.Unrecorded || !n.buildsHere() || ctx.Err() != nil {
			continue
		}
		cur, err := d.ReadCurrent(ctx, n.Settings)
		if err == nil && cur.Runs(n.System) {
			runs[n.Name] = true
			d.note(n.Name, StepBuild, "the host already runs %s after a passing verdict: it is not built here", n.System)
		}
	}
	return runs
}

// startBuilds starts building what nodes need here, but for the nodes
// whose hosts already run their systems (runs, by name).
func (d *Deployer) startBuilds(ctx context.Context, nodes []Target, runs map[string]bool) *localBuilds {
	bs := &localBuilds{drvs: map[string]bool{}, missing: map[string]bool{}, runs: runs}
	var drvs []string
	for _, n := range nodes {
		if !n.buildsHere() || runs[n.Name] {
			continue
		}
		if !inStore(n.Derivation) {
			bs.missing[n.Derivation] = true
			continue
		}
		if !bs.drvs[n.Derivation] {
			drvs = append(drvs, n.Derivation)
		}
		bs.drvs[n.Derivation] = true
	}
	if len(drvs) == 0 {
		return bs
	}
	// A derivation is built for what it makes: two nodes that give it
	// each another system share its build, and the node whose system it
	// does not make fails alone (wait).
	if bs.outputs, bs.err = d.builder().Outputs(ctx, drvs...); bs.err != nil {
		return bs
	}
	outs := map[string]string{}
	for _, drv := range drvs {
		if o := bs.outputs[drv]; len(o) > 0 {
			outs[drv] = o[0]
		}
	}
	for _, n := range nodes {
		if bs.drvs[n.Derivation] && slices.Contains(bs.outputs[n.Derivation], n.System) {
			outs[n.Derivation] = n.System
		}
	}
	d.emit(Event{Kind: EventNote, Message: fmt.Sprintf("building %d systems with one nix-store --realise", len(outs))})
	bs.build, bs.err = d.builder().StartBuild(ctx, outs)
	return bs
}

// builder is the Nix the deployer builds with, in the deployment's
// environment.
func (d *Deployer) builder() nixos.Nix {
	n := d.Options.Builder
	n.Env = append(append([]string{}, d.Options.Env...), n.Env...)
	return n
}

// builds reports whether the rollout builds n's system here.
func (bs *localBuilds) builds(n Target) bool {
	return bs != nil && (bs.drvs[n.Derivation] || bs.missing[n.Derivation])
}

// wait waits for n's system to be built.
func (bs *localBuilds) wait(ctx context.Context, n Target) error {
	switch {
	case bs.missing[n.Derivation]:
		return fail(1, "DerivationMissing", fmt.Sprintf("neither the system %s nor its derivation %s is in this machine's store: the plan was made on another machine, whose evaluation wrote the derivation there", n.System, n.Derivation),
			"plan again on this machine (the same checkout evaluates to the same derivations), or carry them from the machine that planned: nix copy --derivation --to file:///tmp/drvs "+n.Derivation+" there, then nix copy --derivation --from file:///tmp/drvs "+n.Derivation+" here")
	case bs.err != nil:
		return fail(1, "BuildFailed", "the build could not start: "+bs.err.Error(), "")
	case !slices.Contains(bs.outputs[n.Derivation], n.System):
		return fail(1, "SystemNotOfDerivation", fmt.Sprintf("the system %s is not what its derivation %s builds (%s): the node's system and derivation come from different evaluations",
			n.System, n.Derivation, strings.Join(bs.outputs[n.Derivation], ", ")),
			"give the node both from one evaluation: system and derivation of the same fleet_nixos_systems entry")
	}
	err := bs.build.Wait(ctx, n.Derivation)
	var be *nixos.BuildError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(err, &be):
		// The command that prints the log is the hint, said once.
		log := nixos.LogCommand(be.Failed)
		return fail(1, "BuildFailed", "the system did not build: "+strings.Replace(be.Message, "\nits log: "+log, "", 1), "its build log: "+log)
	}
	return fail(1, "BuildFailed", "the system did not build: "+err.Error(), "")
}

// stop ends what still builds.
func (bs *localBuilds) stop() {
	if bs != nil && bs.build != nil {
		bs.build.Stop()
	}
}

var buildStep = &step{
	name: StepBuild, does: "building the system on this machine with Nix", cond: CondCopied,
	run: func(ctx context.Context, nr *nodeRun) error {
		// A build takes nothing of a host: the next node need not wait
		// for it to start.
		nr.begun()
		if err := nr.builds.wait(ctx, nr.n); err != nil {
			return err
		}
		nr.d.note(nr.n.Name, StepBuild, "built %s", nr.n.System)
		return nil
	},
	leaves: func(*nodeRun, bool) string {
		return "nothing was done on the host; its system was being built on this machine, and the build was stopped"
	},
}

var remoteBuildStep = &step{
	name: StepBuild, does: "building the system on the host with nix-store --realise", cond: CondCopied, phase: PhaseCopying,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(ctx); err != nil {
			return err
		}
		// The session's standard input stays open while the build runs:
		// when the deploy stops (the session ends), the host stops
		// building.
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer func() { _ = w.Close() }()
		cmd := nr.c.Command(ctx, remote(remoteBuildScript(nr.n.Derivation)))
		cmd.Stdin = r
		out, err := output(cmd)
		_ = r.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			exit, msg := exitOf(err, out)
			failed, account := nixos.BuilderFailure(out)
			switch failed {
			case "":
				failed = nr.n.Derivation
			case nr.n.Derivation:
				msg = account
			default:
				msg = fmt.Sprintf("%s, which the system needs, did not build: %s", nixos.DerivationName(failed), account)
			}
			return fail(exit, "BuildFailed", fmt.Sprintf("nix-store --realise on the host exited %d: %s", exit, orNone(msg)), "build_on = \"target\" builds with the host's Nix: its log is "+nixos.LogCommand(failed)+", run on the host")
		}
		if !strings.Contains(out, nr.n.System) {
			return fail(1, "BuildFailed", fmt.Sprintf("the host built %s, not the planned system %s", orNone(strings.TrimSpace(out)), nr.n.System), "")
		}
		nr.pass(CondCopied, "BuiltOnHost", "the system was built on the host from its derivation")
		return nil
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return "the system the host runs was not changed (the build on the host stops with the deploy's session, and only adds paths to its store); it runs " + orNone(nr.r.PreviousSystem)
	},
}

// remoteBuildScript realises drv on the host, and stops the build when the
// session's standard input closes (the deployer stopped or went away). The
// watcher reads that input through fd 3: a shell gives a background job
// /dev/null for its standard input, which would end the watch at once and
// interrupt the build as it starts, or miss the session's end.
func remoteBuildScript(drv string) string {
	return "exec 3<&0\nnix-store --realise " + shell.Quote(drv) + ` </dev/null 3<&- & fleet_b=$!
( while read -r _; do :; done <&3; kill -INT $fleet_b 2>/dev/null ) & fleet_w=$!
exec 3<&-
wait $fleet_b; fleet_rc=$?
kill $fleet_w 2>/dev/null
exit $fleet_rc`
}
