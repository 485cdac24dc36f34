package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

// Read reads each node's current system: a host switched by hand shows in
// the next plan. An unreachable host keeps its last known value, with a
// warning.
func (r *deploymentResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m deploymentModel
	getDeployment(ctx, req.State.Get, &m, &resp.Diagnostics)
	if resp.Diagnostics.HasError() || m.Status.IsNull() {
		return
	}
	d, cleanup, err := r.deployer(ctx, &m)
	if err != nil {
		resp.Diagnostics.AddWarning("Hosts not read", err.Error())
		return
	}
	defer cleanup()
	defaults := r.defaults(ctx, &m, &resp.Diagnostics)
	actions := map[string]string{}
	resp.Diagnostics.Append(m.Actions.ElementsAs(ctx, &actions, false)...)
	nodes := map[string]deployNodeModel{}
	for _, n := range r.nodes(ctx, &m, &resp.Diagnostics) {
		nodes[n.Name.ValueString()] = n
	}
	priors := priorNodes(ctx, &m, &resp.Diagnostics)
	records := statusRecords(ctx, &m, &resp.Diagnostics)
	for i, rec := range records {
		name := rec.Name.ValueString()
		n, ok := nodes[name]
		if !ok || actions[name] == actionSkip {
			continue
		}
		settings := r.settings(ctx, defaults, n, priors[name], &resp.Diagnostics)
		if err := d.Transport.Remember(ctx, settings, settings.SeenHostKey); err != nil {
			resp.Diagnostics.AddWarning("Node "+name+" key not remembered", fmt.Sprintf("node %s: %s", name, err))
		}
		current, err := d.ReadCurrent(ctx, settings)
		if err != nil {
			resp.Diagnostics.AddWarning("Node "+name+" not read", fmt.Sprintf("node %s: %s; its last known system is kept", name, strings.TrimRight(err.Error(), ".")))
			continue
		}
		records[i].CurrentSystem = types.StringValue(current.System)
		records[i].VerifiedSystem = types.StringValue(current.Succeeded)
		if current.HostKey != "" && rec.Host.ValueString() == orStr(n.Host.ValueString(), name) {
			records[i].HostKeySeen = types.StringValue(current.HostKey)
		}
		if goal := deploy.Goal(m.Goal.ValueString()); goal == deploy.GoalSwitch || goal == deploy.GoalTest {
			sys := rec.System.ValueString()
			switch {
			case current.System != sys && (actions[name] == actionSwitch || actions[name] == actionNone):
				actions[name] = actionDrift // switched by hand since
			case current.System == sys && actions[name] == actionSwitch:
				actions[name] = actionNone // done: a plan shows switch only for what it will switch
			}
			if actions[name] == actionDrift && current.System != sys {
				resp.Diagnostics.AddWarning("Node "+name+" drifted",
					fmt.Sprintf("node %s runs %s, not %s, which the last deploy left on it: it was switched outside this deployment. The next apply switches it back.", name, current.System, sys))
			}
		}
	}
	m.Status = statusList(ctx, records, &resp.Diagnostics)
	av := map[string]attr.Value{}
	for k, v := range actions {
		av[k] = types.StringValue(v)
	}
	m.Actions = types.MapValueMust(types.StringType, av)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	resp.Diagnostics.Append(setRefreshMark(ctx, resp.Private, r.data.run)...)
}

// Delete forgets the deployment; hosts keep running what they run.
func (r *deploymentResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {
}
