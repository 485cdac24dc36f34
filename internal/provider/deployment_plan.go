package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
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
			_, err := os.Stat(sys)
			drv := n.Derivation.ValueString()
			switch {
			case err != nil && n.Derivation.IsUnknown():
				// Built from a derivation known at apply.
			case err != nil && drv != "":
				// Built by the apply: its derivation must be here.
				if _, err := os.Stat(drv); err != nil {
					diags.AddAttributeError(path.Root("nodes"), "Derivation missing",
						fmt.Sprintf("nodes[%d].derivation: node %s: neither the system %s nor its derivation %s is on this machine: evaluate the configuration here (fleet_nixos_systems does), or copy the derivation here with nix copy --derivation",
							i, n.Name.ValueString(), sys, drv))
				}
			case err != nil:
				diags.AddAttributeError(path.Root("nodes"), "System not built",
					fmt.Sprintf("nodes[%d].system: node %s: system %s does not exist on this machine: give the node its derivation (derivation = data.fleet_nixos_systems.<name>.systems[%q].derivation) so that the apply builds it, or build it first (for example nix build .#nixosConfigurations.%s.config.system.build.toplevel)",
						i, n.Name.ValueString(), sys, n.Name.ValueString(), n.Name.ValueString()))
			case strings.HasSuffix(sys, "/"):
				diags.AddAttributeError(path.Root("nodes"), "Not a system closure",
					fmt.Sprintf("nodes[%d].system: node %s: %s ends with a slash, so the host's /run/current-system would never read the same: remove it", i, n.Name.ValueString(), sys))
			default:
				if _, err := os.Stat(filepath.Join(sys, "bin", "switch-to-configuration")); err != nil {
					diags.AddAttributeError(path.Root("nodes"), "Not a system closure",
						fmt.Sprintf("nodes[%d].system: node %s: %s has no bin/switch-to-configuration, so it is not a NixOS system to switch to: give the system's toplevel (config.system.build.toplevel)", i, n.Name.ValueString(), sys))
				}
			}
		}
	}
	r.checkKeyFiles(ctx, plan, nodes, diags)
	if len(nodes) > 0 {
		if err := deploy.CheckTemporaryDirectory(); err != nil {
			diags.AddWarning("Unusable temporary directory", err.Error()+". An apply starts no node until it is fixed.")
		}
	}
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
	if r.data == nil {
		return
	}
	// The logins this run's refresh kept for the plan end with it,
	// however it ends (a destroy's plan included).
	var held map[string]heldNode
	if !req.State.Raw.IsNull() {
		var id types.String
		req.State.GetAttribute(ctx, path.Root("id"), &id)
		set := r.data.sessions.take(r.data.run, id.ValueString())
		defer set.end()
		if set != nil {
			held = set.nodes
		}
	}
	if req.Plan.Raw.IsNull() {
		if !req.State.Raw.IsNull() {
			var prior deploymentModel
			getDeployment(ctx, req.State.Get, &prior, &resp.Diagnostics)
			warnDestroyed(priorNodes(ctx, &prior, &resp.Diagnostics), &resp.Diagnostics)
			confs, _ := keyConfs(ctx, &prior, nil)
			warnKeysDestroyed(confs, r.nodes(ctx, &prior, &resp.Diagnostics), &resp.Diagnostics)
		}
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
	plan.withOnlyNodes(ctx, req.Config, &resp.Diagnostics)
	sc := planScope(ctx, &plan, seen, &resp.Diagnostics)
	// Write-only: the plan holds null.
	plan.OnlyNodes = types.ListNull(types.StringType)
	hold, holdKnown := sc.hold, sc.known
	if holdKnown {
		// One health policy's error_nodes holds the nodes of several
		// deployments (as the guides wire it): a held name that is not
		// this deployment's is normal, and not worth a warning.
		for name := range hold {
			if !seen[name] {
				tflog.Debug(ctx, "hold names a node this deployment does not have", map[string]any{"node": name})
			}
		}
	}
	priors := priorNodes(ctx, prior, &resp.Diagnostics)
	allNames := namesKnown(nodes)
	checkKeys(ctx, &plan, req.Config, seen, allNames, &resp.Diagnostics)
	checkReboot(&plan, &resp.Diagnostics, false)
	if resp.Diagnostics.HasError() {
		return
	}
	// Nodes the refresh of this run read were logged in to a moment
	// ago (and warned about if that failed): they are not probed again.
	var readNow map[string]deploy.Settings
	if prior != nil && prior.SSHConfigFile.Equal(plan.SSHConfigFile) && prior.KnownHostsFile.Equal(plan.KnownHostsFile) {
		v, _ := r.data.refreshedBy(deploymentKind, prior.ID.ValueString())
		readNow, _ = v.(map[string]deploy.Settings)
	}
	goal := deploy.Goal(plan.Goal.ValueString())
	keys, keysKnown := keyConfs(ctx, &plan, keyContents(ctx, req.Config, &resp.Diagnostics))
	priorKeys, _ := keyConfs(ctx, prior, nil)
	var look map[string]nodeLook
	if goal != deploy.GoalDryActivate && keysKnown && prior != nil {
		look = r.keyLook(ctx, &plan, nodes, priors, readNow, held, hold, keys)
	}
	needs := map[string]keyNeeds{}
	var needOrder, unknownKeys []string
	if allNames {
		warnKeysLeaving(priorKeys, priors, seen, &resp.Diagnostics)
	}
	if len(nodes) == 0 {
		dropped := ""
		if len(priors) > 0 {
			// Each record goes with its node, host_key_seen too.
			names := strings.Join(slices.Sorted(maps.Keys(priors)), ", ")
			dropped = fmt.Sprintf(" The apply drops the records of the %d nodes it has now (%s), their host_key_seen with them.", len(priors), names)
			if len(priors) == 1 {
				dropped = fmt.Sprintf(" The apply drops the record of the node it has now (%s), its host_key_seen with it.", names)
			}
		}
		resp.Diagnostics.AddAttributeWarning(path.Root("nodes"), "Deployment deploys nothing",
			"nodes is empty: this deployment switches no host. If a for expression builds the list, check its filter."+dropped)
	} else {
		warnLeaving(priors, seen, &resp.Diagnostics)
	}
	actions := map[string]attr.Value{}
	// kept are the nodes whose record the apply writes back untouched:
	// known in the plan, so that a change to one node is a short plan.
	kept := map[string]bool{}
	allKnown := holdKnown
	var waiting []string // nodes that would switch, left for a later apply by only_nodes
	bootEntries := false // a node's boot entry is to be made (its last action may have been that too)
	for _, n := range nodes {
		if n.Name.IsUnknown() {
			plan.Actions = types.MapUnknown(types.StringType)
			plan.Status, plan.Phase = types.MapUnknown(deployStatusType), types.StringUnknown()
			plan.SucceededNodes, plan.FailedNodes, plan.SkippedNodes = types.ListUnknown(types.StringType), types.ListUnknown(types.StringType), types.ListUnknown(types.StringType)
			resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
			return
		}
		name := n.Name.ValueString()
		p, known := priors[name]
		a, keep := nodeAction(n, p, known, sc, goal)
		if goal != deploy.GoalDryActivate && !a.IsUnknown() && !sc.leaves(name) && !hold[name] {
			kn := keysOfNode(nodeKeys(keys, name), nodeKeys(priorKeys, name), p.conds, look[name])
			switch {
			case (!keysKnown || !nodeKeysKnown(keys, name)) && (keep || a.ValueString() == actionNone):
				// Which keys it gets, or where, is known at apply: its
				// own plan decides.
				a, keep = types.StringUnknown(), false
				unknownKeys = append(unknownKeys, name)
			case !kn.needed() && len(kn.unknown) > 0 && (keep || a.ValueString() == actionNone):
				// Whether the host holds the content is known once the
				// content is: the apply's own plan decides.
				a, keep = types.StringUnknown(), false
				unknownKeys = append(unknownKeys, name)
			case kn.needed():
				needs[name] = kn
				needOrder = append(needOrder, name)
				if keep || a.ValueString() == actionNone {
					a, keep = types.StringValue(actionKeys), false
				}
			}
		}
		actions[name], kept[name] = a, keep
		bootEntries = bootEntries || a.ValueString() == actionBootEntry && !keep
		if sc.known && sc.leaves(name) && !n.System.IsUnknown() && !hold[name] && needsSwitch(p, known, n.System.ValueString(), goal) {
			waiting = append(waiting, name)
		} else if sc.known && sc.leaves(name) && !hold[name] && goal != deploy.GoalDryActivate && keysOfNode(nodeKeys(keys, name), nodeKeys(priorKeys, name), p.conds, look[name]).needed() {
			// Its keys would change (a rotation): they wait too.
			waiting = append(waiting, name)
		}
		switch {
		case a.IsUnknown() || a.ValueString() == actionPending:
			allKnown = false
		case a.ValueString() == actionBootEntry && !keep:
			resp.Diagnostics.AddWarning("Node "+name+" will make its boot entry",
				fmt.Sprintf("Node %s: the host runs %s after a passing verdict, but boots %s (its system profile): this apply makes %s its boot entry, under the host's deploy lock, and activates nothing.",
					name, p.current, p.boot, n.System.ValueString()))
		case a.ValueString() == actionSkip:
			resp.Diagnostics.AddAttributeWarning(path.Root("hold"), "Node "+name+" is held",
				fmt.Sprintf("Node %s is listed in this deployment's hold, so it is not deployed in this apply and its record stands. "+
					"hold is usually fed from a node health policy's error_nodes: once the node's error is cleared there, it is deployed again.", name))
		}
	}
	plan.Actions = types.MapValueMust(types.StringType, actions)
	warnKeys(needs, needOrder, &resp.Diagnostics)
	if len(unknownKeys) > 0 {
		resp.Diagnostics.AddAttributeWarning(path.Root("keys"), "Keys of "+nodesPhrase(unknownKeys)+" not known yet",
			fmt.Sprintf("A part of the keys (a content, a destination, the nodes that get one) is known only at the apply: the action of %s is known then. The apply compares each key with the host's and puts it in place only where they differ.", strings.Join(unknownKeys, ", ")))
	}
	if len(waiting) > 0 {
		title, rest, them := "Nodes "+strings.Join(waiting, ", ")+" wait for a later apply", "they keep their records", "them"
		if len(waiting) == 1 {
			title, rest, them = "Node "+waiting[0]+" waits for a later apply", "it keeps its record", "it"
		}
		resp.Diagnostics.AddAttributeWarning(path.Root("only_nodes"), title,
			fmt.Sprintf("only_nodes names %s, so this apply deploys no other node. %s would switch (or have their keys put in place): %s, and the next apply without only_nodes deploys %s.",
				list(slices.Sorted(maps.Keys(sc.only))), strings.Join(waiting, ", "), rest, them))
	}
	if prior == nil {
		plan.Generation = types.Int64Value(1)
	} else {
		base := prior.Generation
		if base.IsNull() {
			base = types.Int64Value(1)
		}
		plan.Generation = nextGeneration(base, changeOf(plan.inputs(), prior.inputs()))
	}
	// A configuration unchanged since the last apply plans the records it
	// left, unless the refresh found a node drifted (then the apply
	// switches it back and writes its record anew) or booting another
	// system (the apply makes its boot entry).
	if prior == nil || !req.Plan.Raw.Equal(req.State.Raw) || !plan.Actions.Equal(prior.Actions) || bootEntries || len(needs) > 0 {
		r.planRecords(ctx, &plan, prior, nodes, priors, actions, kept, allKnown, keyChanges{keys: keys, prior: priorKeys, needs: needs}, &resp.Diagnostics)
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
	if !resp.Diagnostics.HasError() {
		r.probe(ctx, &plan, nodes, priors, readNow, held, actions, kept, &resp.Diagnostics)
	}
}

// warnLeaving says, once for all of them, which nodes state has a record
// of and the configuration no longer lists (seen): their hosts keep what
// they run, and their records go.
func warnLeaving(priors map[string]priorNode, seen map[string]bool, diags *diag.Diagnostics) {
	var names, runs []string
	for _, name := range slices.Sorted(maps.Keys(priors)) {
		if seen[name] {
			continue
		}
		names = append(names, name)
		runs = append(runs, fmt.Sprintf("%s keeps running %s", name, orStr(priors[name].current, "what it runs (never read)")))
	}
	switch len(names) {
	case 0:
		return
	case 1:
		diags.AddAttributeWarning(path.Root("nodes"), "Node "+names[0]+" leaves the deployment",
			fmt.Sprintf("Removing a node switches nothing on its host: %s (as last read). The apply drops its record from status, its host_key_seen with it.", runs[0]))
	default:
		diags.AddAttributeWarning(path.Root("nodes"), "Nodes "+strings.Join(names, ", ")+" leave the deployment",
			fmt.Sprintf("Removing nodes switches nothing on their hosts (as last read):\n  %s\nThe apply drops their records from status, their host_key_seen with them.", strings.Join(runs, "\n  ")))
	}
}

// warnDestroyed says what destroying a deployment does to its hosts
// (nothing) and to its records (they go).
func warnDestroyed(priors map[string]priorNode, diags *diag.Diagnostics) {
	names := slices.Sorted(maps.Keys(priors))
	if len(names) == 0 {
		return // no host to speak of
	}
	hosts := fmt.Sprintf("the hosts of its %d nodes (%s) keep running what they run", len(names), strings.Join(names, ", "))
	if len(names) == 1 {
		hosts = fmt.Sprintf("the host of node %s keeps running what it runs", names[0])
	}
	diags.AddWarning("Deployment destroyed: its hosts keep their systems",
		fmt.Sprintf("Destroying a deployment switches no host back and stops nothing: %s. "+
			"Its records go from state: each node's status (its phase, systems and host_key_seen) and the deployment's conditions. "+
			"A deployment created again switches each node to its system as a new node, holding hosts without host_key to the keys in its known_hosts_file.", hosts))
}

// checkKeyFiles refuses at plan a key file that cannot be read, or that is
// encrypted with no ssh-agent to hold it, naming the attribute that set it
// (the node's, the defaults', or the provider's).
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
	builtin, agentKeys := r.builtin()
	provider := "the provider's key, from " + r.data.defaults.keyFrom + " (nodes without a key of their own use it)"
	for i, n := range nodes {
		switch {
		case n.PrivateKeyFile.IsUnknown() || n.Name.IsUnknown():
		case !n.PrivateKeyFile.IsNull():
			check(path.Root("nodes"), fmt.Sprintf("nodes[%d].private_key_file (node %s)", i, n.Name.ValueString()), n.PrivateKeyFile.ValueString())
		case defaults.PrivateKeyFile.IsUnknown():
		case !defaults.PrivateKeyFile.IsNull():
			check(path.Root("defaults"), "defaults.private_key_file", defaults.PrivateKeyFile.ValueString())
		case agentKeys && !reported[provider]:
			if _, err := r.data.defaults.credentials.Signers(); err != nil {
				reported[provider] = true
				diags.AddAttributeError(path.Root("nodes"), "Unusable private key", fmt.Sprintf("%s: %s", provider, err))
			}
		case builtin.PrivateKeyFile != "":
			check(path.Root("nodes"), provider, builtin.PrivateKeyFile)
		}
	}
}

// probe logs in to every node the plan switches, under the provider's
// probe semaphore, warns about those it cannot reach (the apply would fail
// them) and, for a switch, says what the switch will do to the host
// (deploy.Preview). It warns, never decides: the apply plans again, and a
// host seen differently then would make that plan differ.
// A node this run's refresh read with the same settings is asked over the
// login the refresh kept (held), so a plan logs in to each node once; one
// whose read failed was warned about then and is left alone.
func (r *deploymentResource) probe(ctx context.Context, m *deploymentModel, nodes []deployNodeModel, priors map[string]priorNode,
	readNow map[string]deploy.Settings, held map[string]heldNode, actions map[string]attr.Value, kept map[string]bool, diags *diag.Diagnostics) {
	if !fullyKnown(m.Defaults) || m.SSHConfigFile.IsUnknown() || m.KnownHostsFile.IsUnknown() {
		return
	}
	var nd diag.Diagnostics
	defaults := r.defaults(ctx, m, &nd)
	type probed struct {
		index    int // in nodes, for the warning's place in the configuration
		node     deployNodeModel
		settings deploy.Settings
		sess     *deploy.Session // the refresh's login; nil: log in now
		preview  *deploy.Preview
		err      error // the login failed
		unknown  error // the preview failed
	}
	var todo []*probed
	for i, n := range nodes {
		name := n.Name.ValueString()
		a, ok := actions[name].(types.String)
		// A node whose last switch stands (kept) is not switched again:
		// a plan without refresh (-refresh=false) does not log in to it.
		if !ok || a.ValueString() != actionSwitch || kept[name] || !fullyKnownNode(n) {
			continue
		}
		p := &probed{index: i, node: n, settings: r.settings(ctx, defaults, n, priors[name], &nd)}
		if read, ok := readNow[name]; ok && reflect.DeepEqual(read, p.settings) {
			h, ok := held[name]
			if !ok || !reflect.DeepEqual(h.settings, p.settings) {
				continue
			}
			p.sess = h.sess // nil when ended early: logged in to again
		}
		todo = append(todo, p)
	}
	if len(todo) == 0 {
		return
	}
	d, cleanup, err := r.deployer(ctx, m)
	if err != nil {
		return
	}
	defer cleanup()
	goal := deploy.Goal(m.Goal.ValueString())
	previews := (goal == deploy.GoalSwitch || goal == deploy.GoalTest) && !r.data.noPreview
	opts := deploy.PreviewOptions{DryActivate: m.PlanDryActivate.ValueBool()}
	// A plan of many switches spends its time here: say so, and how long
	// each node took, at DEBUG (TF_LOG=DEBUG).
	began := time.Now()
	tflog.Debug(ctx, "previewing the switches the plan makes", map[string]any{"nodes": len(todo), "previews": previews})
	defer func() {
		tflog.Debug(ctx, "previewed the switches the plan makes", map[string]any{"nodes": len(todo), "took": time.Since(began).Round(time.Millisecond).String()})
	}()
	r.underProbeBound(ctx, len(todo), func(i int) {
		p := todo[i]
		nodeBegan := time.Now()
		defer func() {
			tflog.Debug(ctx, "previewed a node's switch", map[string]any{"node": p.node.Name.ValueString(), "took": time.Since(nodeBegan).Round(time.Millisecond).String(),
				"login_failed": p.err != nil, "preview_failed": p.unknown != nil})
		}()
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		sess := p.sess
		if sess == nil {
			if sess, p.err = d.OpenSession(lctx, p.settings); p.err != nil {
				return
			}
			defer sess.Close()
		}
		if !previews {
			return
		}
		pctx := ctx
		if !opts.DryActivate {
			// Queries only; a dry activation copies the closure first,
			// which takes as long as the copy takes.
			var cancel context.CancelFunc
			pctx, cancel = context.WithTimeout(ctx, previewTimeout)
			defer cancel()
		}
		nopts := opts
		nopts.Derivation, nopts.BuildOn = p.node.Derivation.ValueString(), p.settings.BuildOn
		pv, err := d.Preview(pctx, sess, p.node.System.ValueString(), nopts)
		p.preview, p.unknown = &pv, err
	})
	// Each warning points at its node's own element of nodes (a literal
	// list shows that element's lines, a for expression the expression),
	// and nodes whose switches do the same to their hosts (a fleet-wide
	// upgrade) are said once, naming them all, at the first of them.
	type group struct {
		at       int
		previews []deploy.Preview
	}
	var kinds []string
	groups := map[string]*group{}
	for _, p := range todo {
		name := p.node.Name.ValueString()
		at := path.Root("nodes").AtListIndex(p.index)
		switch {
		case p.err != nil:
			diags.AddAttributeWarning(at, "Node "+name+" is unreachable",
				fmt.Sprintf("node %s is planned to switch but cannot be reached now: %s. The apply will fail it unless it is reachable by then (the other nodes go on).", name, strings.TrimRight(p.err.Error(), ".")))
		case p.unknown != nil && ctx.Err() != nil:
			// Interrupted: the plan ends with that.
		case p.unknown != nil:
			diags.AddAttributeWarning(at, "Node "+name+" will switch",
				fmt.Sprintf("Node %s will switch to %s; what the switch will do to the host is not known: %s.", name, p.node.System.ValueString(), strings.TrimRight(p.unknown.Error(), ".")))
		case p.preview != nil:
			kind := p.preview.Alike()
			g, ok := groups[kind]
			if !ok {
				g = &group{at: p.index}
				groups[kind] = g
				kinds = append(kinds, kind)
			}
			g.previews = append(g.previews, *p.preview)
		}
	}
	for _, kind := range kinds {
		g := groups[kind]
		title := deploy.Heading(g.previews)
		diags.AddAttributeWarning(path.Root("nodes").AtListIndex(g.at), title, title+":\n"+deploy.Together(g.previews))
	}
	previewed := map[string]deploy.Preview{}
	var switching []string
	for _, p := range todo {
		if p.err == nil {
			switching = append(switching, p.node.Name.ValueString())
		}
		if p.preview != nil && p.unknown == nil {
			previewed[p.node.Name.ValueString()] = *p.preview
		}
	}
	warnReboots(m, previewed, switching, diags)
}

// plannedKeySeen is the key a successful switch of n records as
// host_key_seen, when a plan can know it: its pin, or the key it was held
// to, at the same host, when no ssh_opts or config file could change which
// key the login accepts; else unknown.
func (r *deploymentResource) plannedKeySeen(ctx context.Context, plan *deploymentModel, n deployNodeModel, p priorNode) types.String {
	if r.data == nil || !plan.SSHConfigFile.IsNull() {
		return types.StringUnknown()
	}
	var nd diag.Diagnostics
	s := r.settings(ctx, r.defaults(ctx, plan, &nd), n, p, &nd)
	for _, o := range s.SSHOpts {
		key, _, _ := strings.Cut(o, "=")
		if deploy.IsHostKeyOption(key) {
			return types.StringUnknown()
		}
	}
	key := strings.TrimSpace(s.HostKey)
	if key == "" {
		key = strings.TrimSpace(s.SeenHostKey)
	}
	if f := strings.Fields(key); len(f) >= 2 && !nd.HasError() {
		return types.StringValue(f[0] + " " + f[1])
	}
	return types.StringUnknown()
}

// previewTimeout bounds the queries of a plan's preview of one node.
const previewTimeout = 60 * time.Second

func fullyKnownNode(n deployNodeModel) bool {
	for _, v := range []attr.Value{n.Name, n.System, n.Derivation, n.BuildOn, n.Host, n.HostKey, n.User, n.PrivateKeyFile, n.SSHOpts} {
		if !fullyKnown(v) {
			return false
		}
	}
	return true
}

// scope is which nodes an apply may deploy: none held, and, when only is
// not nil, only those it names (only_nodes). known is false while hold or
// only_nodes is not known.
type scope struct {
	hold, only map[string]bool
	known      bool
}

// leaves says whether only_nodes leaves node name out.
func (sc scope) leaves(name string) bool { return sc.only != nil && !sc.only[name] }

// planScope is m's scope; only_nodes naming a node m does not have (seen)
// is refused.
func planScope(ctx context.Context, m *deploymentModel, seen map[string]bool, diags *diag.Diagnostics) scope {
	hold, holdKnown := stringSet(ctx, m.Hold, diags)
	sc := scope{hold: hold, known: holdKnown}
	switch {
	case m.OnlyNodes.IsNull():
	case !fullyKnown(m.OnlyNodes):
		sc.known = false
	default:
		sc.only, _ = stringSet(ctx, m.OnlyNodes, diags)
		for _, name := range slices.Sorted(maps.Keys(sc.only)) {
			if !seen[name] {
				diags.AddAttributeError(path.Root("only_nodes"), "Unknown node in only_nodes",
					fmt.Sprintf("only_nodes names %q, which is not in nodes (%s): correct the name, or leave only_nodes unset to deploy every node.", name, list(slices.Sorted(maps.Keys(seen)))))
			}
		}
	}
	return sc
}

// nodeAction is what a plan does with node n, given what state says of it
// (p; known: state has a record of it), the scope and the goal: unknown
// while n's system or the scope is not known; kept says its last record
// stands as it is. A node only_nodes leaves out keeps its record and
// action (pending, for a node state has no record of). A plan asks a node
// what its switch will do only when the action is switch and the record
// does not stand.
func nodeAction(n deployNodeModel, p priorNode, known bool, sc scope, goal deploy.Goal) (action types.String, kept bool) {
	switch {
	case !sc.known || n.System.IsUnknown():
		return types.StringUnknown(), false
	case sc.hold[n.Name.ValueString()]:
		return types.StringValue(actionSkip), known && p.action == actionSkip
	case needsSwitch(p, known, n.System.ValueString(), goal) && sc.leaves(n.Name.ValueString()):
		if known {
			// Its record stands; its action says it waits, so that the
			// next plan, which switches it, shows a change.
			return types.StringValue(actionWaiting), true
		}
		return types.StringValue(actionPending), false
	case needsSwitch(p, known, n.System.ValueString(), goal) && bootEntryOnly(p, known, n.System.ValueString(), goal):
		return types.StringValue(actionBootEntry), false
	case needsSwitch(p, known, n.System.ValueString(), goal):
		return types.StringValue(actionSwitch), false
	case p.action == actionSwitch || p.action == actionNone || p.action == actionBootEntry || p.action == actionKeys:
		return types.StringValue(p.action), true // nothing to do: the last outcome stands
	}
	return types.StringValue(actionNone), false
}

// needsSwitch says whether a node must be switched, from its configured
// system and what state says of it (this run's refresh included): it is
// new, its last switch failed or was interrupted, it drifted, or its host
// runs another system. A host that runs the configured system and records
// it as verified (a deploy of it passed its verdict there) has nothing to
// do, whatever the last apply recorded (a failed switch rolled back, and
// the configuration set back to the system the host runs), but under
// goal switch when it boots another system (bootEntryOnly: the boot
// entry is made); under goal boot, so does a host booting another. No live
// observation decides: the apply's plan must come out the same.
func needsSwitch(p priorNode, known bool, system string, goal deploy.Goal) bool {
	if !known {
		return true
	}
	if goal == deploy.GoalBoot || goal == deploy.GoalDryActivate {
		// The running system stays the old one: what counts is the system
		// the last deploy aimed at.
		return p.action == actionFailed || p.action == actionDrift || p.action == actionPending || p.system != system ||
			goal == deploy.GoalBoot && bootsOther(p, system)
	}
	if p.current == system && p.verified == system {
		return goal == deploy.GoalSwitch && bootsOther(p, system)
	}
	return p.action == actionFailed || p.action == actionDrift || p.action == actionPending || p.current != system
}

// bootsOther says whether the node's host, when last read, booted another
// system than system (boot_system; not known: no).
func bootsOther(p priorNode, system string) bool { return p.boot != "" && p.boot != system }

// bootEntryOnly says whether all a switch of the node has to do is its
// boot entry (action boot-entry): goal switch, and its host runs its
// system after a passing verdict but boots another.
func bootEntryOnly(p priorNode, known bool, system string, goal deploy.Goal) bool {
	return known && goal == deploy.GoalSwitch && p.current == system && p.verified == system && bootsOther(p, system)
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

// planRecords plans what the apply records, keyed by node: a change to
// one node is that node's record alone. A node with nothing to do keeps
// its record, known in the plan, and the apply writes it back untouched.
// Of a node the apply deploys (or holds anew), the plan shows what a
// successful apply records (Terraform holds an apply to its plan only
// when it succeeds, and a failed node fails the apply), and leaves
// unknown what a success does not decide: how it went, and when. A node
// whose action is not known yet has its whole record unknown. The
// summaries and the deployment's phase and condition are known when every
// node's outcome is.
func (r *deploymentResource) planRecords(ctx context.Context, plan, prior *deploymentModel, nodes []deployNodeModel, priors map[string]priorNode,
	actions map[string]attr.Value, kept map[string]bool, allKnown bool, kc keyChanges, diags *diag.Diagnostics) {
	goal := deploy.Goal(plan.Goal.ValueString())
	records := make(map[string]attr.Value, len(nodes))
	planned := make([]deployStatusModel, 0, len(nodes))
	for _, n := range nodes {
		name := n.Name.ValueString()
		a, _ := actions[name].(types.String)
		if a.IsUnknown() || a.ValueString() == actionPending {
			// Not known yet; or a new node only_nodes leaves out, which
			// the apply records as not started.
			records[name] = types.ObjectUnknown(deployStatusAttrTypes)
			continue
		}
		p, known := priors[name]
		rec := keptRecord(n, p)
		if !kept[name] {
			rec = r.successRecord(ctx, plan, n, p, a.ValueString(), goal)
			rec.Conditions = kc.planned(ctx, rec.Conditions, name, a.ValueString(), goal, plan.Generation)
			if rebooting(plan, a.ValueString()) {
				// Whether it reboots (its Rebooted condition) is decided
				// at apply.
				rec.Conditions = types.ListUnknown(nodeConditionObjectType)
			}
		}
		if !known {
			// A new node's conditions all begin at the apply: a line, not
			// six conditions each with a time not known yet.
			rec.Conditions = types.ListUnknown(nodeConditionObjectType)
		}
		rec.Name = n.Name
		planned = append(planned, rec)
		v, d := types.ObjectValueFrom(ctx, deployStatusAttrTypes, rec)
		diags.Append(d...)
		records[name] = v
	}
	plan.Status = types.MapValueMust(deployStatusType, records)
	if !allKnown {
		plan.SucceededNodes, plan.FailedNodes, plan.SkippedNodes = types.ListUnknown(types.StringType), types.ListUnknown(types.StringType), types.ListUnknown(types.StringType)
		plan.ObservedGeneration, plan.Conditions, plan.Phase = types.Int64Unknown(), types.ListUnknown(conditionObjectType), types.StringUnknown()
		return
	}
	plan.SucceededNodes, plan.FailedNodes, plan.SkippedNodes = deploySummaries(planned)
	plan.ObservedGeneration = plan.Generation
	var names []string
	var phases []deploy.Phase
	for _, rec := range planned {
		names, phases = append(names, rec.Name.ValueString()), append(phases, deploy.Phase(rec.Phase.ValueString()))
	}
	var priorConds []conditions.Condition
	if prior != nil {
		priorConds, _ = conditionsFrom(ctx, prior.Conditions)
	}
	// A condition whose status changes gets the apply's time: unknown now.
	conds, err := deploy.DeploymentConditions(priorConds, names, phases, plan.Generation.ValueInt64(), time.Time{})
	if err == nil {
		conds, err = deploymentKeysCondition(ctx, conds, plan, planned, plan.Generation.ValueInt64(), time.Time{})
	}
	if c, ok := conditions.Find(conds, deploy.ConditionReady); err != nil || !ok || c.LastTransitionTime.IsZero() {
		plan.Conditions = types.ListUnknown(conditionObjectType)
	} else {
		plan.Conditions = conditionsList(conds, true, true)
	}
	plan.Phase = deploymentPhase(conds)
}

// successRecord is the record a successful apply writes of a node it
// deploys (action switch), finds done after a failure (none) or holds
// anew (skip; one state has a record of keeps it: heldRecord): what
// success decides is known, the rest unknown. Its
// conditions are what success records (deploy.SucceededConditions, or a
// hold's), known but for the times of those whose status changes: a
// switch that succeeds changes no condition but its generation, and plans
// as a few lines rather than every condition gone unknown.
func (r *deploymentResource) successRecord(ctx context.Context, plan *deploymentModel, n deployNodeModel, p priorNode, action string, goal deploy.Goal) deployStatusModel {
	name := n.Name.ValueString()
	if action == actionSkip && p.recorded() && !plan.Generation.IsUnknown() {
		if rec, err := heldRecord(n, p, plan.Generation.ValueInt64(), time.Time{}, true); err == nil {
			return rec
		}
	}
	unknown := types.StringUnknown()
	rec := deployStatusModel{
		Name: n.Name, Host: types.StringValue(orStr(n.Host.ValueString(), name)), Action: types.StringValue(action), System: n.System,
		Phase: types.StringValue(string(deploy.PhaseSucceeded)), ExitCode: types.Int64Value(0), Hint: types.StringValue(""),
		CurrentSystem: unknown, PreviousSystem: unknown, VerifiedSystem: unknown, BootSystem: unknown, HostKeySeen: r.plannedKeySeen(ctx, plan, n, p), Message: unknown,
		StartedAt: unknown, FinishedAt: unknown, ObservedGeneration: plan.Generation, Conditions: types.ListUnknown(nodeConditionObjectType),
	}
	if !plan.Generation.IsUnknown() {
		var conds []conditions.Condition
		var err error
		switch action {
		case actionSkip:
			conds, err = deploy.NodeConditions(p.conds, deploy.Result{Name: name, Phase: deploy.PhaseSkipped, Message: heldMessage}, plan.Generation.ValueInt64(), time.Time{})
		default:
			conds, err = deploy.SucceededConditions(p.conds, name, goal, plan.Generation.ValueInt64(), time.Time{})
		}
		if err == nil {
			rec.Conditions = nodeConditionsValue(conds, true)
		}
	}
	switch action {
	case actionSkip:
		rec.Phase = types.StringValue(string(deploy.PhaseSkipped))
		rec.HostKeySeen = unknown
	case actionKeys:
		// Its system stands: what the host ran, verified and booted, as
		// last read. After a deploy that succeeded, its record (message,
		// times) stays, with this apply's action and KeysUploaded
		// (keysRecord); after one that did not, the apply writes a record
		// of its own.
		rec.CurrentSystem, rec.VerifiedSystem, rec.BootSystem, rec.PreviousSystem = types.StringValue(p.current), types.StringValue(p.verified), types.StringValue(p.boot), types.StringValue(p.previous)
		if deploy.Phase(p.phase) == deploy.PhaseSucceeded {
			rec = keysRecord(p.record, rec.Conditions, types.StringUnknown())
			rec.HostKeySeen = r.plannedKeySeen(ctx, plan, n, p)
		}
	case actionNone:
		// Not deployed: the record's key stands (at the same host).
		rec.CurrentSystem, rec.VerifiedSystem, rec.BootSystem = types.StringValue(p.current), types.StringValue(p.verified), types.StringValue(p.boot)
		rec.HostKeySeen = types.StringValue(keySeen(n, p, ""))
	default:
		// A node that succeeded runs its system (switch, test) and
		// records it as verified (switch, test; goal boot verifies
		// nothing: what the host had verified, read at apply, stands).
		if goal == deploy.GoalSwitch || goal == deploy.GoalTest {
			rec.CurrentSystem = n.System
			rec.VerifiedSystem = n.System
		}
		// It boots its system (switch, boot: the boot entry made; goal
		// test leaves the profile as the host has it, read at apply).
		if goal == deploy.GoalSwitch || goal == deploy.GoalBoot {
			rec.BootSystem = n.System
		}
	}
	return rec
}
