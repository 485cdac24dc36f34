package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

func (r *deploymentResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m deploymentModel
	getDeployment(ctx, req.Plan.Get, &m, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	id, err := uuid.NewV7()
	if err != nil {
		resp.Diagnostics.AddError("Cannot generate an ID", err.Error())
		return
	}
	m.ID = types.StringValue(id.String())
	timeout, diags := m.Timeouts.Create(ctx, 60*time.Minute)
	resp.Diagnostics.Append(diags...)
	m.withOnlyNodes(ctx, req.Config, &resp.Diagnostics)
	r.apply(ctx, "create", timeout, &m, nil, keyContents(ctx, req.Config, &resp.Diagnostics), &resp.Diagnostics)
	// Write-only: state holds null.
	m.OnlyNodes, m.KeyContents = types.ListNull(types.StringType), types.MapNull(types.StringType)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *deploymentResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, prior deploymentModel
	getDeployment(ctx, req.Plan.Get, &m, &resp.Diagnostics)
	getDeployment(ctx, req.State.Get, &prior, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	m.ID = prior.ID
	timeout, diags := m.Timeouts.Update(ctx, 60*time.Minute)
	resp.Diagnostics.Append(diags...)
	m.withOnlyNodes(ctx, req.Config, &resp.Diagnostics)
	r.apply(ctx, "update", timeout, &m, &prior, keyContents(ctx, req.Config, &resp.Diagnostics), &resp.Diagnostics)
	// Write-only: state holds null.
	m.OnlyNodes, m.KeyContents = types.ListNull(types.StringType), types.MapNull(types.StringType)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// keptRecord is the record of node n whose last outcome stands: state's,
// with host_key_seen as keySeen says.
func keptRecord(n deployNodeModel, p priorNode) deployStatusModel {
	rec := p.record
	rec.HostKeySeen = types.StringValue(keySeen(n, p, ""))
	return rec
}

// keySeen is node n's host_key_seen when this run saw seen ("" when it
// did not reach the host): what it saw; else a host_key the configuration
// pins now (the apply that re-pins a re-keyed host records its new key,
// not a run later: a node is held to its pin); else what state recorded
// at the same host; else nothing. The plan and the apply say it alike.
func keySeen(n deployNodeModel, p priorNode, seen string) string {
	if seen != "" {
		return seen
	}
	host := orStr(n.Host.ValueString(), n.Name.ValueString())
	if p.host != host {
		return ""
	}
	if f := strings.Fields(n.HostKey.ValueString()); len(f) >= 2 {
		return f[0] + " " + f[1]
	}
	return p.hostKeySeen
}

// heldMessage is the message of a node held back.
const heldMessage = "held: listed in this deployment's hold"

// heldRecord is the record of node n, which state knows (p), newly held
// back: what its last deploy recorded stands (systems, times, exit code,
// the steps' conditions); its action, phase, message and Ready say it is
// held. planned says it is a plan's, whose changed times are unknown (now
// is zero).
func heldRecord(n deployNodeModel, p priorNode, generation int64, now time.Time, planned bool) (deployStatusModel, error) {
	conds, err := deploy.NodeConditions(p.conds, deploy.Result{Name: n.Name.ValueString(), Phase: deploy.PhaseSkipped, Message: heldMessage}, generation, now)
	if err != nil {
		return deployStatusModel{}, err
	}
	rec := p.record
	rec.Action, rec.Phase = types.StringValue(actionSkip), types.StringValue(string(deploy.PhaseSkipped))
	rec.Message, rec.Hint = types.StringValue(heldMessage), types.StringValue("")
	rec.HostKeySeen = types.StringValue(keySeen(n, p, ""))
	rec.ObservedGeneration, rec.Conditions = types.Int64Value(generation), nodeConditionsValue(conds, planned)
	return rec, nil
}

// recorded says whether state holds a record of the node p describes.
func (p priorNode) recorded() bool { return p.record.Name.ValueString() != "" }

// errInterrupted is what an interrupt (Ctrl-C, Terraform stopping the
// provider) records.
var errInterrupted = errors.New("interrupted")

// applyContext bounds an apply by its timeouts block and ends it on an
// interrupt: one event for the engine, whose cause names which.
func (r *deploymentResource) applyContext(ctx context.Context, op string, timeout time.Duration) (context.Context, func()) {
	ctx, interrupt := context.WithCancelCause(ctx)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the timeouts block's %s limit (%s) expired", op, timeout))
	stop := func() bool { return false }
	if r.data.interrupt != nil {
		stop = context.AfterFunc(r.data.interrupt, func() { interrupt(errInterrupted) })
	}
	return ctx, func() { stop(); cancel(); interrupt(nil) }
}

// apply deploys the nodes the plan switches and records every node. It
// follows the plan: a node planned switch is deployed (and found already
// done at apply, if its host runs its system after a passing verdict),
// any other keeps its record. Failures are error diagnostics after all
// nodes ran; so is an interrupt, which leaves later nodes untouched.
//
// Every way out goes through record, which writes what happened over
// everything the plan predicted: Terraform keeps the state an apply
// returns, errors or not, and a prediction of success left there would
// keep the next plan from switching what did not switch.
func (r *deploymentResource) apply(ctx context.Context, op string, timeout time.Duration, m, prior *deploymentModel, contents map[string]types.String, diags *diag.Diagnostics) {
	ctx, stop := r.applyContext(ctx, op, timeout)
	defer stop()
	a := r.applyPlanOf(ctx, m, prior, diags)
	a.keys, _ = keyConfs(ctx, m, contents)
	a.priorKeys, _ = keyConfs(ctx, prior, nil)
	targets := r.targets(ctx, m, a, diags)
	leaving := r.leavingKeys(ctx, prior, a)
	results := r.deploy(ctx, m, append(targets, leaving...))
	if len(leaving) > 0 {
		warnKeysLeft(m.ID.ValueString(), leaving, results[len(targets):], diags)
		results = results[:len(targets)]
	}
	a.record(ctx, m, prior, results, time.Now().UTC(), diags)
}

// applyPlan is what an apply follows: the configured nodes, what state
// said of them, and the actions and hold the plan decided.
type applyPlan struct {
	nodes   []deployNodeModel
	priors  map[string]priorNode
	planned map[string]string
	hold    map[string]bool
	only    map[string]bool // nil: every node
	goal    deploy.Goal
	// keys are the keys configured now, with their contents; priorKeys
	// those state has (the hosts have them).
	keys, priorKeys []keyConf
	// standing are the nodes whose record the plan kept as state has it
	// (known in full): their last outcome stands, whatever its action.
	recordStands map[string]bool
}

func (r *deploymentResource) applyPlanOf(ctx context.Context, m, prior *deploymentModel, diags *diag.Diagnostics) applyPlan {
	a := applyPlan{nodes: r.nodes(ctx, m, diags), priors: priorNodes(ctx, prior, diags), planned: map[string]string{}, goal: deploy.Goal(m.Goal.ValueString())}
	diags.Append(m.Actions.ElementsAs(ctx, &a.planned, false)...)
	a.hold, _ = stringSet(ctx, m.Hold, diags)
	a.recordStands = map[string]bool{}
	if !m.Status.IsNull() && !m.Status.IsUnknown() {
		for name, e := range m.Status.Elements() {
			rec, ok := e.(types.Object)
			if ok && !rec.IsUnknown() && !rec.IsNull() {
				msg, _ := rec.Attributes()["message"].(types.String)
				a.recordStands[name] = !msg.IsUnknown()
			}
		}
	}
	if !m.OnlyNodes.IsNull() {
		a.only, _ = stringSet(ctx, m.OnlyNodes, diags)
	}
	return a
}

// leftOut says whether only_nodes leaves node n out of this apply.
func (a applyPlan) leftOut(n deployNodeModel) bool {
	return a.only != nil && !a.only[n.Name.ValueString()]
}

// switches says whether the apply deploys node n: the plan switches it,
// decided as the plan decided it (from the configuration and state,
// never from a live look). "switch" is also the last outcome a node with
// nothing to do keeps.
func (a applyPlan) switches(n deployNodeModel) bool {
	name := n.Name.ValueString()
	p, known := a.priors[name]
	return !a.hold[name] && !a.leftOut(n) && (a.planned[name] == actionSwitch || a.planned[name] == actionBootEntry) && needsSwitch(p, known, n.System.ValueString(), a.goal)
}

// keysOnly says whether the apply puts node n's keys in place alone, as
// the plan decided (action keys).
func (a applyPlan) keysOnly(n deployNodeModel) bool {
	name := n.Name.ValueString()
	return !a.hold[name] && !a.leftOut(n) && a.planned[name] == actionKeys && !a.recordStands[name]
}

// targets are the nodes the apply deploys, in node order, each with its
// keys and the destinations of those it no longer has.
func (r *deploymentResource) targets(ctx context.Context, m *deploymentModel, a applyPlan, diags *diag.Diagnostics) []deploy.Target {
	defaults := r.defaults(ctx, m, diags)
	var targets []deploy.Target
	for _, n := range a.nodes {
		switches, keysOnly := a.switches(n), a.keysOnly(n)
		if !switches && !keysOnly {
			continue
		}
		name := n.Name.ValueString()
		p, known := a.priors[name]
		t := deploy.Target{System: n.System.ValueString(), Derivation: n.Derivation.ValueString(),
			Settings: r.settings(ctx, defaults, n, p, diags), Unrecorded: !known || p.current == "", KeysOnly: keysOnly}
		if keysOnly {
			t.Derivation = "" // nothing is built or copied
		}
		if a.goal != deploy.GoalDryActivate {
			t.Keys = nodeKeys(a.keys, name)
			t.RemovedKeys = keysOfNode(t.Keys, nodeKeys(a.priorKeys, name), nil, nodeLook{}).removed
		}
		targets = append(targets, t)
	}
	return targets
}

// deploy runs the rollout of targets. A deployer that cannot start here
// (a temporary directory others control, a key that cannot be served)
// starts none of them: each is not started, for that reason, like the
// nodes an interrupt or the failure budget keeps from starting.
func (r *deploymentResource) deploy(ctx context.Context, m *deploymentModel, targets []deploy.Target) []deploy.Result {
	if len(targets) == 0 {
		return nil
	}
	d, cleanup, err := r.deployer(ctx, m)
	if err != nil {
		out := make([]deploy.Result, len(targets))
		for i, t := range targets {
			out[i] = deploy.NotStarted(t, "the deployment could not start: "+strings.TrimRight(err.Error(), "."))
		}
		return out
	}
	defer cleanup()
	return d.Deploy(ctx, targets, nil)
}

// record writes into m what the apply did: every node's record, in node
// order, from its result when the apply deployed it (or tried to), else
// from what state said and the hold; the actions, the summaries, the
// deployment's conditions and phase. Nothing the plan predicted is left.
func (a applyPlan) record(ctx context.Context, m, prior *deploymentModel, results []deploy.Result, now time.Time, diags *diag.Diagnostics) {
	byName := map[string]deploy.Result{}
	for _, res := range results {
		byName[res.Name] = res
	}
	generation := m.Generation.ValueInt64()
	actions := map[string]attr.Value{}
	statuses := make([]deployStatusModel, 0, len(a.nodes))
	var pending []string
	var summary []string
	for _, n := range a.nodes {
		name := n.Name.ValueString()
		res, ran := byName[name]
		rec, action, err := a.nodeRecord(n, res, ran, generation, now)
		switch {
		case err != nil:
			diags.AddAttributeError(path.Root("nodes"), "Node "+name+" not recorded",
				fmt.Sprintf("node %s: what this apply did cannot be written (%s); its last record stands, and the next plan switches it again.", name, err))
			rec, action = a.standing(n, generation, now)
		case ran && res.Phase == deploy.PhasePending:
			pending = append(pending, name)
		case ran && res.Failed():
			diags.AddAttributeError(path.Root("nodes"), deploy.ResultLine(res), orStr(res.Hint, "See status for this node."))
		}
		actions[name] = types.StringValue(action)
		statuses = append(statuses, rec)
		if ran {
			summary = append(summary, fmt.Sprintf("%-20s %-10s %s", name, res.Phase, res.Message))
		}
	}
	if len(pending) > 0 {
		diags.AddAttributeError(path.Root("nodes"), "Deployment stopped: "+strings.Join(pending, ", ")+" not started",
			pendingCause(byName, pending)+". They were not touched, and the next plan deploys them.")
	}
	if diags.HasError() {
		// Terraform and OpenTofu evaluate no output that reads a resource
		// whose apply failed: such outputs keep what they held before it
		// (or what the plan knew of them), while state has the records.
		diags.AddWarning("Outputs that read this deployment were not updated",
			"This apply failed, so Terraform (and OpenTofu) leave the outputs that read this deployment as they were before it, or as the plan showed them: "+
				"a failed_nodes output may still say []. State has what happened (terraform state show, tofu state show). "+
				"terraform apply -refresh-only -auto-approve (tofu apply -refresh-only -auto-approve with OpenTofu), or the next apply, brings the outputs in line with it.")
	}
	m.Actions = types.MapValueMust(types.StringType, actions)
	m.Status = statusMap(ctx, statuses, diags)
	m.SucceededNodes, m.FailedNodes, m.SkippedNodes = deploySummaries(statuses)
	var names []string
	var phases []deploy.Phase
	for _, rec := range statuses {
		names, phases = append(names, rec.Name.ValueString()), append(phases, deploy.Phase(rec.Phase.ValueString()))
	}
	var priorConds []conditions.Condition
	m.ObservedGeneration = types.Int64Null()
	if prior != nil {
		priorConds, _ = conditionsFrom(ctx, prior.Conditions)
		m.ObservedGeneration = prior.ObservedGeneration
	}
	conds, err := deploy.DeploymentConditions(priorConds, names, phases, generation, now)
	if err == nil {
		conds, err = deploymentKeysCondition(ctx, conds, m, statuses, generation, now)
	}
	if err != nil {
		diags.AddError("Deployment conditions not written", err.Error()+"; the deployment's last conditions stand.")
		conds = priorConds
	} else {
		m.ObservedGeneration = m.Generation
	}
	m.Conditions = conditionsValue(conds)
	m.Phase = deploymentPhase(conds)
	if len(summary) > 0 {
		tflog.Info(ctx, "deployment summary\n"+strings.Join(summary, "\n"))
	}
}

// nodeRecord is node n's record and action after the apply: res is its
// result when the apply deployed it (ran). An error says the record cannot
// be built.
func (a applyPlan) nodeRecord(n deployNodeModel, res deploy.Result, ran bool, generation int64, now time.Time) (deployStatusModel, string, error) {
	name := n.Name.ValueString()
	p, known := a.priors[name]
	action := a.planned[name]
	switch {
	case !ran && known && !a.hold[name] && a.leftOut(n) && needsSwitch(p, known, n.System.ValueString(), a.goal):
		// only_nodes leaves it for a later apply: its record is written
		// back untouched, as the plan showed it, and its action says it
		// waits.
		return keptRecord(n, p), actionWaiting, nil
	case !ran && known && (a.hold[name] && p.action == actionSkip || !a.hold[name] && (p.action == actionSwitch || p.action == actionNone || p.action == actionBootEntry || p.action == actionKeys)):
		// Nothing to do, and nothing new to record (still held, or its
		// last outcome stands): the record is written back untouched, as
		// the plan showed it.
		return keptRecord(n, p), p.action, nil
	case !a.hold[name] && a.leftOut(n) && !known:
		res = deploy.Result{Name: name, Phase: deploy.PhasePending,
			Message: "not started: only_nodes left this node for a later apply, which deploys it"}
		action = actionPending
	case a.hold[name]:
		res = deploy.Result{Name: name, Phase: deploy.PhaseSkipped, Message: heldMessage,
			CurrentSystem: p.current, PreviousSystem: p.previous, VerifiedSystem: p.verified, BootSystem: p.boot}
		action = actionSkip
		if known {
			rec, err := heldRecord(n, p, generation, now, false)
			return rec, action, err
		}
	case !ran:
		// Planned none after a failure: the host runs the configured
		// system, which passed its verdict there.
		res = deploy.Result{Name: name, System: n.System.ValueString(), Goal: a.goal, Phase: deploy.PhaseSucceeded, CurrentSystem: p.current, PreviousSystem: p.previous, VerifiedSystem: p.verified, BootSystem: p.boot,
			Message: fmt.Sprintf("nothing to do: the host runs %s, which passed its verdict there", n.System.ValueString())}
	case action == actionKeys && res.Phase == deploy.PhaseSucceeded && deploy.Phase(p.phase) == deploy.PhaseSucceeded:
		// Its system stands, as the plan said: the record of its last
		// deploy stays, with this apply's action and conditions.
		rec, err := a.resultRecord(n, res, action, generation, now)
		if err != nil {
			return rec, action, err
		}
		rec = keysRecord(p.record, rec.Conditions, types.StringValue(res.Message+" (at "+timeString(res.Finished)+")"))
		rec.HostKeySeen = types.StringValue(keySeen(n, p, res.HostKeySeen))
		return rec, action, nil
	case action == actionKeys:
		// A record of its own (after a failure or an interrupt, whose
		// record it mends; or its own failure, which KeysUploaded and
		// Ready say, and which the next plan puts right again: its action
		// stays keys). Its system stands: the record keeps what the host
		// ran, verified and booted when last read.
		res.CurrentSystem, res.PreviousSystem, res.VerifiedSystem, res.BootSystem = p.current, p.previous, p.verified, p.boot
	case res.Phase == deploy.PhasePending:
		action = actionPending
	case res.Failed():
		action = actionFailed
	}
	if ran && res.CurrentSystem == "" && !res.SystemsUnknown {
		// Failed before the host was read: what was known stands.
		res.CurrentSystem, res.PreviousSystem, res.VerifiedSystem, res.BootSystem = p.current, p.previous, p.verified, p.boot
	}
	rec, err := a.resultRecord(n, res, action, generation, now)
	return rec, action, err
}

// resultRecord is node n's record of res, with action.
func (a applyPlan) resultRecord(n deployNodeModel, res deploy.Result, action string, generation int64, now time.Time) (deployStatusModel, error) {
	name := n.Name.ValueString()
	p := a.priors[name]
	conds, err := deploy.NodeConditions(p.conds, res, generation, now)
	if err != nil {
		return deployStatusModel{}, err
	}
	cv := nodeConditionsValue(conds, false)
	host := orStr(n.Host.ValueString(), name)
	seen := keySeen(n, p, res.HostKeySeen)
	exit := types.Int64Value(int64(res.ExitCode))
	if res.Phase == deploy.PhasePending {
		exit = types.Int64Null() // never started: no step failed or passed
	}
	return deployStatusModel{
		Name: types.StringValue(name), Host: types.StringValue(host), Action: types.StringValue(action),
		Phase: types.StringValue(string(deploy.NodePhase(conds))), System: n.System, CurrentSystem: types.StringValue(res.CurrentSystem),
		PreviousSystem: types.StringValue(res.PreviousSystem), VerifiedSystem: types.StringValue(res.VerifiedSystem), BootSystem: types.StringValue(res.BootSystem),
		HostKeySeen: types.StringValue(seen), ExitCode: exit,
		Message: types.StringValue(res.Message), Hint: types.StringValue(res.Hint),
		StartedAt: types.StringValue(timeString(res.Started)), FinishedAt: types.StringValue(timeString(res.Finished)),
		ObservedGeneration: types.Int64Value(generation), Conditions: cv,
	}, nil
}

// standing is the record and action of node n when what the apply did to
// it cannot be written: the ones state holds, else, for a node state has
// no record of, pending, which the next plan switches (and whose apply
// finds it done, if it was). Its message holds no error text, which may be
// what made the record unwritable.
func (a applyPlan) standing(n deployNodeModel, generation int64, now time.Time) (deployStatusModel, string) {
	name := n.Name.ValueString()
	if p, known := a.priors[name]; known {
		return p.record, p.action
	}
	res := deploy.Result{Name: name, Phase: deploy.PhasePending, Message: "not recorded: what the apply did to this node cannot be written (see the apply's errors)"}
	if rec, err := a.resultRecord(n, res, actionPending, generation, now); err == nil {
		return rec, actionPending
	}
	// Not even that (a name conditions refuse): no conditions, which read
	// Pending.
	cv := nodeConditionsValue(nil, false)
	return deployStatusModel{
		Name: n.Name, Host: types.StringValue(orStr(n.Host.ValueString(), name)), Action: types.StringValue(actionPending),
		Phase: types.StringValue(string(deploy.NodePhase(nil))), System: n.System, CurrentSystem: types.StringValue(""),
		PreviousSystem: types.StringValue(""), VerifiedSystem: types.StringValue(""), BootSystem: types.StringValue(""), HostKeySeen: types.StringValue(""),
		ExitCode: types.Int64Null(), Message: types.StringValue(res.Message), Hint: types.StringValue(""),
		StartedAt: types.StringValue(""), FinishedAt: types.StringValue(""), ObservedGeneration: types.Int64Value(generation), Conditions: cv,
	}, actionPending
}

// pendingCause is why the nodes not started were not, in the words their
// results give the first of them.
func pendingCause(results map[string]deploy.Result, names []string) string {
	msg := strings.TrimPrefix(results[names[0]].Message, "not started: ")
	msg = strings.TrimRight(strings.Replace(msg, "before this node started", "before these nodes started", 1), ".")
	return strings.ToUpper(msg[:1]) + msg[1:]
}
