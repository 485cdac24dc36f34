package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

var applyTime = time.Date(2026, 10, 7, 12, 0, 0, 0, time.UTC)

func testNode(name, system string) deployNodeModel {
	return deployNodeModel{Name: types.StringValue(name), System: types.StringValue(system), Host: types.StringNull()}
}

// plannedModel is a deployment as the plan leaves it for the apply: the
// records and summaries unknown, as a plan of a success leaves what a
// success does not decide.
func plannedModel(actions map[string]string) *deploymentModel {
	m := &deploymentModel{}
	m.Generation = types.Int64Value(2)
	m.ObservedGeneration = types.Int64Unknown()
	m.Actions = types.MapValueMust(types.StringType, stringValues(actions))
	m.Status = types.MapUnknown(deployStatusType)
	m.SucceededNodes, m.FailedNodes, m.SkippedNodes = types.ListUnknown(types.StringType), types.ListUnknown(types.StringType), types.ListUnknown(types.StringType)
	m.Conditions, m.Phase = types.ListUnknown(conditionObjectType), types.StringUnknown()
	return m
}

func stringValues(m map[string]string) map[string]attr.Value {
	out := map[string]attr.Value{}
	for k, v := range m {
		out[k] = types.StringValue(v)
	}
	return out
}

// priorOf is what state says of node n after a deploy that ended in res,
// with action.
func priorOf(t *testing.T, n deployNodeModel, res deploy.Result, action string) priorNode {
	t.Helper()
	rec, err := applyPlan{}.resultRecord(n, res, action, 1, applyTime.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	conds, d := nodeConditionsFrom(context.Background(), rec.Conditions, rec.ObservedGeneration)
	if d.HasError() {
		t.Fatal(d)
	}
	return priorNode{action: action, phase: rec.Phase.ValueString(), system: n.System.ValueString(), current: res.CurrentSystem,
		previous: res.PreviousSystem, verified: res.VerifiedSystem, host: rec.Host.ValueString(), conds: conds, record: rec}
}

func recordsOf(t *testing.T, m *deploymentModel) []deployStatusModel {
	t.Helper()
	if m.Status.IsUnknown() || m.Status.IsNull() {
		t.Fatalf("status is left %s: the plan's, not what the apply did", m.Status)
	}
	var d diag.Diagnostics
	return statusRecords(context.Background(), m, &d)
}

// A record that cannot be built (an outcome whose reason the conditions
// refuse) leaves what state said: the prior record and action of a node
// state knows, a pending record of one it does not; never the plan's
// prediction. The other nodes are recorded as they went, the apply fails
// naming the node, and the next plan switches both again.
func TestApplyKeepsThePriorRecordOfANodeItCannotRecord(t *testing.T) {
	t.Parallel()
	const old, sys = "/nix/store/old-system", "/nix/store/new-system"
	n1, n2, n3 := testNode("n1", sys), testNode("n2", sys), testNode("n3", sys)
	prior := priorOf(t, n1, deploy.Result{Name: "n1", Phase: deploy.PhaseSucceeded, CurrentSystem: old, VerifiedSystem: old, Message: "switched"}, actionSwitch)
	a := applyPlan{nodes: []deployNodeModel{n1, n2, n3}, priors: map[string]priorNode{"n1": prior},
		planned: map[string]string{"n1": actionSwitch, "n2": actionSwitch, "n3": actionSwitch}, hold: map[string]bool{}, goal: deploy.GoalSwitch}
	unwritable := map[deploy.Condition]deploy.Outcome{deploy.CondReachable: {Passed: true, Reason: "not camel case", Message: "reached"}}
	results := []deploy.Result{
		{Name: "n1", Phase: deploy.PhaseFailed, ExitCode: 1, CurrentSystem: sys, VerifiedSystem: sys, Outcomes: unwritable, Message: "failed"},
		{Name: "n2", Phase: deploy.PhaseFailed, ExitCode: 1, CurrentSystem: sys, VerifiedSystem: sys, Outcomes: unwritable, Message: "failed"},
		{Name: "n3", Phase: deploy.PhaseSucceeded, CurrentSystem: sys, VerifiedSystem: sys, Message: "switched", Started: applyTime, Finished: applyTime},
	}
	m := plannedModel(a.planned)
	var diags diag.Diagnostics
	a.record(context.Background(), m, nil, results, applyTime, &diags)

	recs := recordsOf(t, m)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	if fmt.Sprint(recs[0]) != fmt.Sprint(prior.record) {
		t.Errorf("n1's record is not the one state held:\n got %v\nwant %v", recs[0], prior.record)
	}
	if recs[1].Phase.ValueString() != string(deploy.PhasePending) || recs[1].Action.ValueString() != actionPending || !recs[1].ExitCode.IsNull() ||
		recs[1].CurrentSystem.ValueString() != "" || !strings.HasPrefix(recs[1].Message.ValueString(), "not recorded") {
		t.Errorf("n2, new and not recordable: %v; want pending, no exit code, nothing known of its host", recs[1])
	}
	if recs[2].Phase.ValueString() != string(deploy.PhaseSucceeded) || recs[2].CurrentSystem.ValueString() != sys {
		t.Errorf("n3, recordable, was not recorded as it went: %v", recs[2])
	}
	if got := fmt.Sprint(m.Actions); got != fmt.Sprint(types.MapValueMust(types.StringType, stringValues(map[string]string{"n1": actionSwitch, "n2": actionPending, "n3": actionSwitch}))) {
		t.Errorf("actions %s", got)
	}
	var notRecorded []string
	for _, d := range diags.Errors() {
		if strings.HasSuffix(d.Summary(), "not recorded") {
			notRecorded = append(notRecorded, d.Summary())
			if !strings.Contains(d.Detail(), "not CamelCase") {
				t.Errorf("%s: %s, want the reason named", d.Summary(), d.Detail())
			}
		}
	}
	if fmt.Sprint(notRecorded) != "[Node n1 not recorded Node n2 not recorded]" {
		t.Errorf("errors %v, want one for each of n1 and n2", diags.Errors())
	}
	// The next plan switches both: n1's record still says its host runs
	// the old system, n2's that it is pending.
	for _, rec := range recs[:2] {
		p := priorNode{action: actionOf(m, rec.Name.ValueString()), current: rec.CurrentSystem.ValueString(), verified: rec.VerifiedSystem.ValueString()}
		if !needsSwitch(p, true, sys, deploy.GoalSwitch) {
			t.Errorf("the next plan would not switch %s: %v", rec.Name.ValueString(), rec)
		}
	}
	if m.Phase.ValueString() != "Failed" || m.Conditions.IsUnknown() || m.ObservedGeneration.ValueInt64() != 2 {
		t.Errorf("deployment: phase %s, conditions %s, observed generation %s", m.Phase, m.Conditions, m.ObservedGeneration)
	}
}

func actionOf(m *deploymentModel, name string) string {
	v, _ := m.Actions.Elements()[name].(types.String)
	return v.ValueString()
}

// The deployment's phase ladder, as the apply and the plan derive it from
// the Ready condition the nodes' records sum up to: Succeeded when every
// node is, Failed when one failed, was rolled back or was not started
// (held nodes or not), else Partial (a node held).
func TestDeploymentPhaseLadder(t *testing.T) {
	t.Parallel()
	const sys = "/nix/store/new-system"
	const held = deploy.Phase("held") // not deployed: listed in hold
	for _, c := range []struct {
		name   string
		nodes  []deploy.Phase
		phase  string
		status string
		reason string
	}{
		{"every node succeeded", []deploy.Phase{deploy.PhaseSucceeded, deploy.PhaseSucceeded}, "Succeeded", "True", "AllNodesSucceeded"},
		{"one failed", []deploy.Phase{deploy.PhaseSucceeded, deploy.PhaseFailed}, "Failed", "False", "NodesFailed"},
		{"one rolled back", []deploy.Phase{deploy.PhaseRolledBack, deploy.PhaseSucceeded}, "Failed", "False", "NodesFailed"},
		{"one not started", []deploy.Phase{deploy.PhaseSucceeded, deploy.PhasePending}, "Failed", "False", "NodesFailed"},
		{"one held", []deploy.Phase{deploy.PhaseSucceeded, held}, "Partial", "Unknown", "NodesHeld"},
		{"one held, one failed", []deploy.Phase{held, deploy.PhaseFailed}, "Failed", "False", "NodesFailed"},
		{"one held, one not started", []deploy.Phase{deploy.PhasePending, held}, "Failed", "False", "NodesFailed"},
		{"every node held", []deploy.Phase{held, held}, "Partial", "Unknown", "NodesHeld"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := applyPlan{priors: map[string]priorNode{}, planned: map[string]string{}, hold: map[string]bool{}, goal: deploy.GoalSwitch}
			var results []deploy.Result
			for i, p := range c.nodes {
				name := fmt.Sprintf("n%d", i+1)
				a.nodes = append(a.nodes, testNode(name, sys))
				if p == held {
					a.planned[name], a.hold[name] = actionSkip, true
					continue
				}
				a.planned[name] = actionSwitch
				res := deploy.Result{Name: name, Phase: p, Message: string(p)}
				if p == deploy.PhaseFailed || p == deploy.PhaseRolledBack {
					res.ExitCode = 1
				}
				results = append(results, res)
			}
			m := plannedModel(a.planned)
			var diags diag.Diagnostics
			a.record(context.Background(), m, nil, results, applyTime, &diags)
			var ready []conditionModel
			if d := m.Conditions.ElementsAs(context.Background(), &ready, false); d.HasError() || len(ready) != 1 {
				t.Fatalf("the deployment's conditions: %v %v", m.Conditions, d)
			}
			if m.Phase.ValueString() != c.phase || ready[0].Status.ValueString() != c.status || ready[0].Reason.ValueString() != c.reason {
				t.Errorf("node phases %v: the apply records phase %s, Ready %s (%s); want %s, %s (%s)",
					c.nodes, m.Phase, ready[0].Status, ready[0].Reason, c.phase, c.status, c.reason)
			}
		})
	}
}

// The plan of a successful apply derives its phase by the same ladder:
// Succeeded when it switches every node, Partial when it holds one.
func TestDeploymentPhaseLadderInThePlan(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		actions []string
		phase   string
	}{
		{[]string{actionSwitch, actionSwitch}, "Succeeded"},
		{[]string{actionSwitch, actionSkip}, "Partial"},
		{[]string{actionSkip, actionSkip}, "Partial"},
	} {
		var nodes []deployNodeModel
		actions := map[string]attr.Value{}
		for i, a := range c.actions {
			name := fmt.Sprintf("n%d", i+1)
			nodes = append(nodes, testNode(name, "/nix/store/new-system"))
			actions[name] = types.StringValue(a)
		}
		plan := plannedModel(nil)
		plan.Goal = types.StringValue(string(deploy.GoalSwitch))
		var diags diag.Diagnostics
		(&deploymentResource{}).planRecords(context.Background(), plan, nil, nodes, map[string]priorNode{}, actions, map[string]bool{}, true, keyChanges{}, &diags)
		if diags.HasError() || plan.Phase.ValueString() != c.phase {
			t.Errorf("actions %v: the plan's phase %s, want %s (%v)", c.actions, plan.Phase, c.phase, diags)
		}
	}
}
