package provider

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timetypes/timetypes"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/health"
)

// A changed policy plans its records from its state (this run's refresh
// included) and its configuration alone, as the deployment does, so that
// what hangs on it (a deployment's hold = error_nodes) stays known at
// plan, and the apply records exactly what the plan said (Terraform plans
// again during the apply, and holds that plan to this one):
//
//   - a node the change neither adds nor clears keeps its record as the
//     refresh left it; a change of its checks is first observed by the
//     next refresh (a record's conditions say the generation it last
//     changed at);
//   - a node removed goes, with its record;
//   - a node added is pending (health.Pending) until the next refresh
//     evaluates it;
//   - a node in error whose clear_errors entry is added or changed is
//     cleared when the evaluation its record holds found its checks
//     passing (health.Replay), as of that evaluation.

// planStatus plans m's status and summaries from prior's records and m's
// configuration; false when it cannot (an error is in diags).
func (r *nodeHealthPolicyResource) planStatus(ctx context.Context, m, prior *nodeHealthPolicyModel, diags *diag.Diagnostics) bool {
	p, _ := r.compile(ctx, m.policyInputs, diags)
	if diags.HasError() {
		return false
	}
	// The policy the records were evaluated under.
	var ignored diag.Diagnostics
	was, _ := prior.doc(ctx, &ignored).policy(connectionDefaults{}, nil)
	priors := map[string]attr.Value{}
	if !prior.Status.IsNull() {
		priors = prior.Status.Elements()
	}
	clears := changedClears(m.ClearErrors, prior.ClearErrors)
	status := map[string]attr.Value{}
	states := map[string]health.State{}
	for _, name := range slices.Sorted(maps.Keys(p.Nodes)) {
		o, known := priors[name].(types.Object)
		if !known {
			status[name], states[name] = pendingStatusValue(p, name), health.StatePending
			continue
		}
		status[name] = o
		if note, ok := clears[name]; ok {
			status[name] = r.clearedStatus(ctx, was, m, name, o, note, diags)
		}
		state, _ := status[name].(types.Object).Attributes()["state"].(types.String)
		states[name] = health.State(state.ValueString())
	}
	m.Status = types.MapValueMust(nodeStatusType, status)
	m.HealthyNodes, m.SchedulableNodes, m.ErrorNodes, m.MissingNodes = summaries(states)
	return !diags.HasError()
}

// pendingStatusValue is the record of a node the policy gains.
func pendingStatusValue(p *health.Policy, node string) types.Object {
	return nodeStatusValue(p, health.Report{Node: node, Roles: p.Nodes[node].Roles}, health.Pending(node))
}

// clearedStatus is node's record o after the clear note: cleared when o is
// in error and the evaluation it records reached the node and found its
// checks passing (under was, the policy of that evaluation), else o, with
// a warning saying why the error stands.
func (r *nodeHealthPolicyResource) clearedStatus(ctx context.Context, was *health.Policy, m *nodeHealthPolicyModel, node string, o types.Object, note string, diags *diag.Diagnostics) types.Object {
	prev, d := nodeRecordFrom(ctx, o)
	if d.HasError() || prev == nil || prev.State != health.StateError {
		return o
	}
	refused := func(why string) types.Object {
		diags.AddAttributeWarning(path.Root("clear_errors").AtMapKey(node), "Clear of node "+node+" not applied",
			fmt.Sprintf("Node %s stays in error: %s\nChange the note in clear_errors[%q] again once they pass.", node, why, node))
		return o
	}
	evaluated, _ := conditions.Find(prev.Conditions, health.ConditionEvaluated)
	at := parseTimestamp(timestampOf(o, "evaluated_at"))
	if evaluated.Status != conditions.True || at.IsZero() {
		return refused(fmt.Sprintf("its last evaluation could not run its checks (%s), so whether they pass is not known.", prev.Reason))
	}
	rep, ok := health.Replay(was, node, checkResults(o), at)
	if !ok {
		return refused("its last evaluation did not run every check the policy gives it; the next refresh does.")
	}
	rec, result, err := health.Advance(prev, rep, was, &note, int(m.AutoClearAfter.ValueInt64()), m.Generation.ValueInt64())
	switch {
	case err != nil:
		diags.AddError("Node health record not updated", fmt.Sprintf("node %s: %s; this is a bug in the provider", node, err))
		return o
	case result != health.ClearApplied:
		return refused(fmt.Sprintf("its checks failed at its last evaluation (%s): %s", at.Format(time.RFC3339), rec.Reason))
	}
	return nodeStatusValue(was, rep, rec)
}

// timestampOf is the time attribute name of a status record.
func timestampOf(o types.Object, name string) timetypes.RFC3339 {
	t, _ := o.Attributes()[name].(timetypes.RFC3339)
	return t
}

// checkResults are the check results a status record holds, by identity.
func checkResults(o types.Object) map[string]health.Result {
	out := map[string]health.Result{}
	l, ok := o.Attributes()["checks"].(types.List)
	if !ok || l.IsNull() || l.IsUnknown() {
		return out
	}
	for _, e := range l.Elements() {
		c, ok := e.(types.Object)
		if !ok || c.IsNull() || c.IsUnknown() {
			continue
		}
		a := c.Attributes()
		id, _ := a["id"].(types.String)
		healthy, _ := a["healthy"].(types.Bool)
		detail, _ := a["detail"].(types.String)
		tier, _ := a["tier"].(types.String)
		ms, _ := a["duration_ms"].(types.Int64)
		out[id.ValueString()] = health.Result{Healthy: healthy.ValueBool(), Detail: detail.ValueString(), Tier: tier.ValueString(),
			Duration: time.Duration(ms.ValueInt64()) * time.Millisecond}
	}
	return out
}
