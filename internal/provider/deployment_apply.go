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
	r.apply(ctx, "create", timeout, &m, nil, &resp.Diagnostics)
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
	r.apply(ctx, "update", timeout, &m, &prior, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

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
// nodes ran; so is an interrupt, which leaves later nodes untouched. The
// state is saved whatever happened.
func (r *deploymentResource) apply(ctx context.Context, op string, timeout time.Duration, m, prior *deploymentModel, diags *diag.Diagnostics) {
	ctx, stop := r.applyContext(ctx, op, timeout)
	defer stop()
	nodes := r.nodes(ctx, m, diags)
	priors := priorNodes(ctx, prior, diags)
	planned := map[string]string{}
	diags.Append(m.Actions.ElementsAs(ctx, &planned, false)...)
	hold, _ := stringSet(ctx, m.Hold, diags)
	d, cleanup, err := r.deployer(ctx, m)
	if err != nil {
		diags.AddError("Deployment not started", err.Error())
		return
	}
	defer cleanup()
	defaults := r.defaults(ctx, m, diags)
	var targets []deploy.Target
	for _, n := range nodes {
		name := n.Name.ValueString()
		// A node the plan switches, decided as the plan decided it (from
		// the configuration and state, never from a live look): "switch"
		// is also the last outcome a node with nothing to do keeps.
		p, known := priors[name]
		if !hold[name] && planned[name] == actionSwitch && needsSwitch(p, known, n.System.ValueString(), deploy.Goal(m.Goal.ValueString())) {
			targets = append(targets, deploy.Target{System: n.System.ValueString(), Settings: r.settings(ctx, defaults, n, p, diags)})
		}
	}
	byName := map[string]deploy.Result{}
	for _, res := range d.Deploy(ctx, targets, nil) {
		byName[res.Name] = res
	}
	now := time.Now().UTC()
	generation := m.Generation.ValueInt64()
	actions := map[string]attr.Value{}
	var statuses []deployStatusModel
	var notStarted []string
	var summary []string
	for _, n := range nodes {
		name := n.Name.ValueString()
		p, known := priors[name]
		res, ran := byName[name]
		action := planned[name]
		switch {
		case !ran && known && (hold[name] && p.action == actionSkip || !hold[name] && (p.action == actionSwitch || p.action == actionNone)):
			// Nothing to do, and nothing new to record (still held, or its
			// last outcome stands): the record is written back untouched,
			// as the plan showed it.
			actions[name] = types.StringValue(p.action)
			statuses = append(statuses, p.record)
			continue
		case hold[name]:
			res = deploy.Result{Name: name, Phase: deploy.PhaseSkipped, Message: "held: listed in this deployment's hold",
				CurrentSystem: p.current, PreviousSystem: p.previous, VerifiedSystem: p.verified}
			action = actionSkip
		case !ran:
			// Planned none after a failure: the host runs the configured
			// system, which passed its verdict there.
			res = deploy.Result{Name: name, Phase: deploy.PhaseSucceeded, CurrentSystem: p.current, PreviousSystem: p.previous, VerifiedSystem: p.verified,
				Message: fmt.Sprintf("nothing to do: the host runs %s, which passed its verdict there", n.System.ValueString())}
		case res.Phase == deploy.PhasePending:
			action = actionPending
			notStarted = append(notStarted, name)
		case res.Failed():
			action = actionFailed
			diags.AddAttributeError(path.Root("nodes"), deploy.FailedLine(name, res.ExitCode, res.Message), orStr(res.Hint, "See status for this node."))
		}
		if ran && res.CurrentSystem == "" {
			// Failed before the host was read: what was known stands.
			res.CurrentSystem, res.PreviousSystem, res.VerifiedSystem = p.current, p.previous, p.verified
		}
		actions[name] = types.StringValue(action)
		conds, err := deploy.NodeConditions(p.conds, res, generation, now)
		if err != nil {
			diags.AddError("Node record not written", err.Error())
			return
		}
		cv, d := conditionsValue(conds)
		diags.Append(d...)
		host := orStr(n.Host.ValueString(), name)
		seen := res.HostKeySeen
		if seen == "" && p.host == host {
			seen = p.hostKeySeen // not reached this time: the recorded key stands
		}
		exit := types.Int64Value(int64(res.ExitCode))
		if res.Phase == deploy.PhasePending {
			exit = types.Int64Null() // never started: no step failed or passed
		}
		statuses = append(statuses, deployStatusModel{
			Name: types.StringValue(name), Host: types.StringValue(host), Action: types.StringValue(action),
			Phase: types.StringValue(string(deploy.NodePhase(conds))), System: n.System, CurrentSystem: types.StringValue(res.CurrentSystem),
			PreviousSystem: types.StringValue(res.PreviousSystem), VerifiedSystem: types.StringValue(res.VerifiedSystem),
			HostKeySeen: types.StringValue(seen), ExitCode: exit,
			Message: types.StringValue(res.Message), Hint: types.StringValue(res.Hint),
			StartedAt: types.StringValue(timeString(res.Started)), FinishedAt: types.StringValue(timeString(res.Finished)),
			Conditions: cv,
		})
		if ran {
			summary = append(summary, fmt.Sprintf("%-20s %-10s %s", name, res.Phase, res.Message))
		}
	}
	if len(notStarted) > 0 {
		diags.AddAttributeError(path.Root("nodes"), "Deployment stopped: "+strings.Join(notStarted, ", ")+" not started",
			fmt.Sprintf("%s before these nodes started; they were not touched, and the next plan switches them.", pendingCause(byName, notStarted)))
	}
	m.Actions = types.MapValueMust(types.StringType, actions)
	m.Status = statusList(ctx, statuses, diags)
	m.SucceededNodes, m.FailedNodes, m.SkippedNodes = deploySummaries(statuses)
	var names []string
	var phases []deploy.Phase
	for _, rec := range statuses {
		names, phases = append(names, rec.Name.ValueString()), append(phases, deploy.Phase(rec.Phase.ValueString()))
	}
	var priorConds []conditions.Condition
	if prior != nil {
		priorConds, _ = conditionsFrom(ctx, prior.Conditions)
	}
	conds, err := deploy.DeploymentConditions(priorConds, names, phases, generation, now)
	if err != nil {
		diags.AddError("Deployment conditions not written", err.Error())
		return
	}
	dcv, dd := conditionsValue(conds)
	diags.Append(dd...)
	m.Conditions, m.ObservedGeneration = dcv, m.Generation
	m.Phase = types.StringValue(conditions.Phase(conds, deploy.DeploymentPhases, "Partial"))
	if len(summary) > 0 {
		tflog.Info(ctx, "deployment summary\n"+strings.Join(summary, "\n"))
	}
}

// pendingCause is why the nodes not started were not: the engine's words
// on the first of them.
func pendingCause(results map[string]deploy.Result, names []string) string {
	msg := strings.TrimPrefix(results[names[0]].Message, "not started: ")
	msg, _, _ = strings.Cut(msg, " before this node started")
	return strings.ToUpper(msg[:1]) + msg[1:]
}
