package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// checkNodes refuses what can be known of the nodes before any file or
// host is looked at: a name listed twice, a name that must serve as the
// host and cannot. It returns the names known.
func checkNodes(nodes []deployNodeModel, diags *diag.Diagnostics) map[string]bool {
	seen := map[string]bool{}
	for i, n := range nodes {
		if n.Name.IsUnknown() || n.Name.IsNull() {
			continue
		}
		name := n.Name.ValueString()
		if seen[name] {
			diags.AddAttributeError(path.Root("nodes"), "Duplicate node", fmt.Sprintf("nodes[%d].name: node %q is listed twice", i, name))
		}
		seen[name] = true
		if n.Host.IsNull() {
			if err := sshdial.CheckHost(name); err != nil {
				diags.AddAttributeError(path.Root("nodes"), "Invalid host", fmt.Sprintf("nodes[%d]: with no host, the name is the host: %s; set host", i, err))
			}
		}
	}
	return seen
}

// checkLocalFiles refuses at plan what the machine running Terraform
// shows wrong: a system that is not built, a key file ssh cannot use, an
// ssh_config_file that does not exist, a known_hosts file another user
// could have written.
func (r *deploymentResource) checkLocalFiles(ctx context.Context, plan *deploymentModel, nodes []deployNodeModel, diags *diag.Diagnostics) {
	for i, n := range nodes {
		if sys := n.System.ValueString(); !n.System.IsUnknown() && !n.System.IsNull() {
			if _, err := os.Stat(sys); err != nil {
				diags.AddAttributeError(path.Root("nodes"), "System not built",
					fmt.Sprintf("nodes[%d].system: node %s: system %s does not exist on this machine: build it first (for example nix build .#nixosConfigurations.%s.config.system.build.toplevel)",
						i, n.Name.ValueString(), sys, n.Name.ValueString()))
			}
		}
	}
	r.checkKeyFiles(ctx, plan, nodes, diags)
	if f := plan.SSHConfigFile; !f.IsUnknown() && !f.IsNull() && f.ValueString() != "" {
		expanded, err := sshdial.ExpandHome(f.ValueString())
		if err == nil {
			_, err = os.Stat(expanded)
		}
		if err != nil {
			diags.AddAttributeError(path.Root("ssh_config_file"), "Missing ssh_config_file",
				fmt.Sprintf("ssh_config_file %s cannot be read (%v): ssh would only warn and go on without it, reaching other hosts than meant. Create it, or correct the path.", f.ValueString(), errors.Unwrap(err)))
		}
	}
	if fullyKnown(plan.Defaults) && !plan.KnownHostsFile.IsUnknown() {
		if _, err := r.knownHostsFile(ctx, plan); err != nil {
			diags.AddAttributeError(path.Root("known_hosts_file"), "Unusable known_hosts file", err.Error())
		}
	}
}

func (r *deploymentResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return
	}
	var plan deploymentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	// Parts known only now (from variables or other resources) are
	// checked now; validate checked the rest.
	plan.decode(ctx, &resp.Diagnostics)
	var prior *deploymentModel
	if !req.State.Raw.IsNull() {
		prior = &deploymentModel{}
		getDeployment(ctx, req.State.Get, prior, &resp.Diagnostics)
	}
	if resp.Diagnostics.HasError() || plan.Nodes.IsUnknown() {
		return
	}
	nodes := r.nodes(ctx, &plan, &resp.Diagnostics)
	seen := checkNodes(nodes, &resp.Diagnostics)
	r.checkLocalFiles(ctx, &plan, nodes, &resp.Diagnostics)
	hold, holdKnown := stringSet(ctx, plan.Hold, &resp.Diagnostics)
	if holdKnown {
		for name := range hold {
			if !seen[name] {
				resp.Diagnostics.AddAttributeWarning(path.Root("hold"), "Unknown node in hold", fmt.Sprintf("hold names %q, which is not in nodes.", name))
			}
		}
	}
	priors := priorNodes(ctx, prior, &resp.Diagnostics)
	actions := map[string]attr.Value{}
	switching := false
	for _, n := range nodes {
		if n.Name.IsUnknown() {
			plan.Actions = types.MapUnknown(types.StringType)
			resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
			return
		}
		name := n.Name.ValueString()
		p, known := priors[name]
		switch {
		case !holdKnown || n.System.IsUnknown():
			actions[name] = types.StringUnknown()
			switching = true
		case hold[name]:
			actions[name] = types.StringValue(actionSkip)
			switching = switching || p.action != actionSkip
			resp.Diagnostics.AddAttributeWarning(path.Root("hold"), "Node "+name+" is held", fmt.Sprintf("Node %s is in hold: it will not be deployed in this apply.", name))
		case needsSwitch(p, known, n.System.ValueString(), deploy.Goal(plan.Goal.ValueString())):
			switching = true
			actions[name] = types.StringValue(actionSwitch)
		case p.action == actionSwitch || p.action == actionNone:
			actions[name] = types.StringValue(p.action) // nothing to do: the last outcome stands
		default:
			actions[name] = types.StringValue(actionNone)
		}
	}
	plan.Actions = types.MapValueMust(types.StringType, actions)
	if switching || prior == nil || !req.Plan.Raw.Equal(req.State.Raw) {
		// Any apply records what it does: every record is new.
		plan.Status = types.ListUnknown(deployStatusType)
		plan.Phase = types.StringUnknown()
		plan.SucceededNodes, plan.FailedNodes, plan.SkippedNodes = types.ListUnknown(types.StringType), types.ListUnknown(types.StringType), types.ListUnknown(types.StringType)
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
	if !resp.Diagnostics.HasError() {
		// Nodes the refresh of this run read were logged in to a moment
		// ago (and warned about if that failed): they are not probed again.
		var readNow map[string]deploy.Settings
		if prior != nil && readRefreshMark(ctx, req.Private).Run == r.data.run &&
			prior.SSHConfigFile.Equal(plan.SSHConfigFile) && prior.KnownHostsFile.Equal(plan.KnownHostsFile) {
			readNow = map[string]deploy.Settings{}
			priorDefaults := r.defaults(ctx, prior, &resp.Diagnostics)
			for _, n := range r.nodes(ctx, prior, &resp.Diagnostics) {
				if p, ok := priors[n.Name.ValueString()]; ok && p.action != actionSkip {
					readNow[n.Name.ValueString()] = r.settings(ctx, priorDefaults, n, p, &resp.Diagnostics)
				}
			}
		}
		r.probe(ctx, &plan, nodes, priors, readNow, actions, &resp.Diagnostics)
	}
}

// checkKeyFiles refuses at plan a key file that cannot be read, or that is
// encrypted with no ssh-agent to hold it, naming the attribute that set it
// (the node's, the defaults', or FLEET_SSH_PRIVATE_KEY_FILE).
func (r *deploymentResource) checkKeyFiles(ctx context.Context, plan *deploymentModel, nodes []deployNodeModel, diags *diag.Diagnostics) {
	if plan.Defaults.IsUnknown() {
		return
	}
	var defaults deployDefaultsModel
	if !plan.Defaults.IsNull() {
		diags.Append(plan.Defaults.As(ctx, &defaults, objectAsOptions)...)
	}
	agentSocket := os.Getenv("SSH_AUTH_SOCK")
	reported := map[string]bool{}
	// Each fault is reported once, on the attribute that holds it, and
	// names the place inside it.
	check := func(attr path.Path, what, file string) {
		if reported[what] {
			return
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := deploy.CheckKeyFile(actx, file, agentSocket); err != nil {
			reported[what] = true
			diags.AddAttributeError(attr, "Unusable private key", fmt.Sprintf("%s: %s", what, err))
		}
	}
	env := os.Getenv(deploy.EnvSSHPrivateKeyFile)
	for i, n := range nodes {
		switch {
		case n.PrivateKeyFile.IsUnknown() || n.Name.IsUnknown():
		case !n.PrivateKeyFile.IsNull():
			check(path.Root("nodes"), fmt.Sprintf("nodes[%d].private_key_file (node %s)", i, n.Name.ValueString()), n.PrivateKeyFile.ValueString())
		case defaults.PrivateKeyFile.IsUnknown():
		case !defaults.PrivateKeyFile.IsNull():
			check(path.Root("defaults"), "defaults.private_key_file", defaults.PrivateKeyFile.ValueString())
		case env != "":
			check(path.Root("nodes"), deploy.EnvSSHPrivateKeyFile+" (the built-in key of nodes without one)", env)
		}
	}
}

// probe logs in to every node the plan switches, under the provider's
// probe semaphore, and warns about those it cannot reach: the apply would
// fail them. It warns, never decides: the apply plans again, and a host
// seen differently then would make that plan differ.
// Nodes in readNow, whose settings are unchanged, were read by this run's
// refresh and are not probed again.
func (r *deploymentResource) probe(ctx context.Context, m *deploymentModel, nodes []deployNodeModel, priors map[string]priorNode,
	readNow map[string]deploy.Settings, actions map[string]attr.Value, diags *diag.Diagnostics) {
	if !fullyKnown(m.Defaults) || m.SSHConfigFile.IsUnknown() || m.KnownHostsFile.IsUnknown() {
		return
	}
	var nd diag.Diagnostics
	defaults := r.defaults(ctx, m, &nd)
	var switching []deployNodeModel
	var settings []deploy.Settings
	for _, n := range nodes {
		a, ok := actions[n.Name.ValueString()].(types.String)
		if !ok || a.ValueString() != actionSwitch || !fullyKnownNode(n) {
			continue
		}
		s := r.settings(ctx, defaults, n, priors[n.Name.ValueString()], &nd)
		if read, ok := readNow[n.Name.ValueString()]; ok && reflect.DeepEqual(read, s) {
			continue
		}
		switching, settings = append(switching, n), append(settings, s)
	}
	if len(switching) == 0 {
		return
	}
	d, cleanup, err := r.deployer(ctx, m)
	if err != nil {
		return
	}
	defer cleanup()
	failures := make([]string, len(switching))
	var wg sync.WaitGroup
	for i, s := range settings {
		if err := r.data.prober.Slots.Acquire(ctx, 1); err != nil {
			break // interrupted: the probes started still end
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.data.prober.Slots.Release(1)
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if _, err := d.ReadCurrent(pctx, s); err != nil {
				failures[i] = err.Error()
			}
		}()
	}
	wg.Wait()
	for i, f := range failures {
		if f != "" {
			name := switching[i].Name.ValueString()
			diags.AddAttributeWarning(path.Root("nodes"), "Node "+name+" is unreachable",
				fmt.Sprintf("node %s is planned to switch but cannot be reached now: %s. The apply will fail it unless it is reachable by then (the other nodes go on).", name, strings.TrimRight(f, ".")))
		}
	}
}

func fullyKnownNode(n deployNodeModel) bool {
	for _, v := range []attr.Value{n.Name, n.System, n.Host, n.HostKey, n.User, n.PrivateKeyFile, n.SSHOpts} {
		if !fullyKnown(v) {
			return false
		}
	}
	return true
}

// needsSwitch says whether a node must be switched, from its configured
// system and what state says of it (this run's refresh included): it is
// new, its last switch failed or was interrupted, it drifted, or its host
// runs another system. A host that runs the configured system and records
// it as verified (a deploy of it passed its verdict there) has nothing to
// do, whatever the last apply recorded: a failed switch rolled back, and
// the configuration set back to the system the host runs. No live
// observation decides: the apply's plan must come out the same.
func needsSwitch(p priorNode, known bool, system string, goal deploy.Goal) bool {
	if !known {
		return true
	}
	if goal == deploy.GoalBoot || goal == deploy.GoalDryActivate {
		// The running system stays the old one: what counts is the system
		// the last deploy aimed at.
		return p.action == actionFailed || p.action == actionDrift || p.action == actionPending || p.system != system
	}
	if p.current == system && p.verified == system {
		return false
	}
	return p.action == actionFailed || p.action == actionDrift || p.action == actionPending || p.current != system
}

func stringSet(ctx context.Context, l types.List, diags *diag.Diagnostics) (map[string]bool, bool) {
	out := map[string]bool{}
	if l.IsUnknown() || !fullyKnown(l) {
		return out, false
	}
	for _, s := range stringsOf(ctx, l, diags) {
		out[s] = true
	}
	return out, true
}
