package provider

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

const deploymentKind = "fleet_ssh_deployment"

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
	// What this refresh logged in to, with which settings: the plan of
	// the same run does not log in to those again.
	readNow := map[string]deploy.Settings{}
	// The hosts are read at once, under the provider's probe bound, so a
	// refresh takes about ceil(nodes / probe_concurrency) reads; what
	// they found is then recorded in node order.
	// Each read keeps its login (a session) for the plan of the same run,
	// which asks a switching node what the switch will do over it.
	type read struct {
		sess *deploy.Session
		err  error
		done bool
		// keys are the node's keys, as state has them, and what its host
		// has at their destinations (keysErr: that could not be read).
		keys    []deploy.Key
		states  []deploy.KeyState
		keysErr error
	}
	keyConfsNow, _ := keyConfs(ctx, &m, nil)
	if deploy.Goal(m.Goal.ValueString()) == deploy.GoalDryActivate {
		keyConfsNow = nil
	}
	reads := make([]read, len(records))
	var todo []int // records to read
	settings := make([]deploy.Settings, len(records))
	for i, rec := range records {
		name := rec.Name.ValueString()
		n, ok := nodes[name]
		if !ok || actions[name] == actionSkip {
			continue
		}
		settings[i] = r.settings(ctx, defaults, n, priors[name], &resp.Diagnostics)
		readNow[name] = settings[i]
		// known_hosts is one file: written one node at a time.
		if err := d.Transport.Remember(ctx, settings[i], settings[i].SeenHostKey); err != nil {
			resp.Diagnostics.AddWarning("Node "+name+" key not remembered", fmt.Sprintf("node %s: %s", name, err))
		}
		todo = append(todo, i)
	}
	started := r.underProbeBound(ctx, len(todo), func(k int) {
		i := todo[k]
		sess, err := d.OpenSession(ctx, settings[i])
		reads[i] = read{sess: sess, err: err, done: true}
		if keys := nodeKeys(keyConfsNow, records[i].Name.ValueString()); err == nil && len(keys) > 0 {
			reads[i].keys = keys
			var h deploy.KeysOnHost
			h, reads[i].keysErr = sess.KeyStates(ctx, keys)
			reads[i].states = h.States
		}
	})
	for _, i := range todo[started:] {
		reads[i] = read{err: fmt.Errorf("interrupted before the host was read"), done: true}
	}
	held := map[string]heldNode{}
	settled := false
	for i, rec := range records {
		name := rec.Name.ValueString()
		n := nodes[name]
		if !reads[i].done {
			continue
		}
		err := reads[i].err
		if err != nil {
			// The same title as the plan's and the apply's look at a node
			// they cannot reach: one filter finds them all.
			resp.Diagnostics.AddWarning("Node "+name+" is unreachable", fmt.Sprintf("node %s could not be read: %s; its last known system is kept, and a switch planned for it fails unless it is reachable by then", name, strings.TrimRight(err.Error(), ".")))
			continue
		}
		held[name] = heldNode{settings: readNow[name], sess: reads[i].sess}
		current := reads[i].sess.Current
		records[i].CurrentSystem = types.StringValue(current.System)
		records[i].VerifiedSystem = types.StringValue(current.Succeeded)
		records[i].BootSystem = types.StringValue(current.Boots)
		if current.HostKey != "" && rec.Host.ValueString() == orStr(n.Host.ValueString(), name) {
			records[i].HostKeySeen = types.StringValue(current.HostKey)
		}
		if current.Settling {
			resp.Diagnostics.AddWarning("Node "+name+" is settling", fmt.Sprintf("node %s: its host's watchdog has not finished with an earlier run (an interrupted or killed apply's): it switches the host back unless a confirmation reached it, on its own, "+
				"so what the host runs (%s) may change any moment, and no system counts as verified there until it has. An apply now waits for the host's deploy lock (lock_timeout) or fails at once naming what holds it.", name, orStr(current.System, "nothing known")))
		}
		if deploy.Phase(rec.Phase.ValueString()) == deploy.PhaseUnknown && !current.Settling {
			// (A host that settles a run on its own is read again by a
			// later refresh, once it has.)
			// The last apply could not learn how this node's deploy ended:
			// what the host runs now says.
			if msg, ok := settleUnknown(&records[i], priors[name], current, deploy.Goal(m.Goal.ValueString()), r.data.clock.Now().UTC(), &resp.Diagnostics); ok {
				settled = true
				actions[name] = records[i].Action.ValueString()
				resp.Diagnostics.AddWarning("Node "+name+" settled", fmt.Sprintf("node %s: the last apply could not learn how its deploy ended; this refresh read the host: %s", name, msg))
			}
		}
		if goal := deploy.Goal(m.Goal.ValueString()); goal == deploy.GoalSwitch || goal == deploy.GoalTest {
			sys, now := rec.System.ValueString(), r.data.clock.Now().UTC()
			// A refresh that finds what the last apply left writes nothing:
			// the action it recorded stands (a drift job must not see a
			// change after every deploy).
			switch {
			case current.System != sys && (actions[name] == actionSwitch || actions[name] == actionNone || actions[name] == actionBootEntry || actions[name] == actionKeys):
				actions[name] = actionDrift // switched by hand since
			case actions[name] == actionDrift && current.System == sys && current.Succeeded == sys:
				// Back on the system the last deploy left, which passed its
				// verdict there: the drift is over, nothing to do.
				actions[name] = actionNone
				if driftOver(&records[i], priors[name], goal, now) {
					settled = true
				}
			}
			if goal == deploy.GoalSwitch && !current.Settling && current.System == sys && current.Succeeded == sys && current.Boots != "" && current.Boots != sys {
				// Its boot entry was changed outside (the last apply made
				// it): a drift, which the plan mends with the boot entry.
				bootsAnother(&records[i], priors[name], current.Boots, goal, now, &resp.Diagnostics)
				actions[name] = actionDrift
				settled = true
			}
			if actions[name] == actionDrift && current.System != sys {
				msg := fmt.Sprintf("node %s runs %s, not %s, which the last deploy left on it: something else switched it since (by hand, another deployment, "+
					"the host's watchdog rolling back an activation this deployment left unconfirmed when it was interrupted, "+
					"or an apply of this deployment killed before it could record its switch). "+
					"The next apply switches it back, unless the configuration now names the system it runs.", name, current.System, sys)
				resp.Diagnostics.AddWarning("Node "+name+" drifted", msg)
				if markNotReady(&records[i], priors[name], reasonDrifted, msg, now) {
					settled = true
				}
			}
		}
		if goal := deploy.Goal(m.Goal.ValueString()); goal == deploy.GoalBoot {
			// Goal boot: the boot entry the last deploy made is what
			// counts; one changed since is a drift, which the next apply
			// makes again.
			sys, now := rec.System.ValueString(), r.data.clock.Now().UTC()
			switch a := actions[name]; {
			case !current.Settling && current.Boots != "" && current.Boots != sys && (a == actionSwitch || a == actionNone || a == actionDrift):
				bootsAnother(&records[i], priors[name], current.Boots, goal, now, &resp.Diagnostics)
				actions[name] = actionDrift
				settled = true
			case a == actionDrift && current.Boots == sys:
				actions[name] = actionNone
				if driftOver(&records[i], priors[name], goal, now) {
					settled = true
				}
			}
		}
		if reads[i].keysErr != nil {
			resp.Diagnostics.AddWarning("Node "+name+" keys not read", fmt.Sprintf("node %s: %s; its KeysUploaded condition stands", name, reads[i].keysErr))
		} else if len(reads[i].keys) > 0 {
			if keysRead(&records[i], reads[i].keys, reads[i].states, r.data.clock.Now().UTC()) {
				settled = true
			}
		}
	}
	m.Status = statusMap(ctx, records, &resp.Diagnostics)
	if settled {
		settleDeployment(ctx, &m, records, r.data.clock.Now().UTC(), &resp.Diagnostics)
	}
	av := map[string]attr.Value{}
	for k, v := range actions {
		av[k] = types.StringValue(v)
	}
	m.Actions = types.MapValueMust(types.StringType, av)
	completeStatus(ctx, &m, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	r.data.refreshed(deploymentKind, m.ID.ValueString(), readNow)
	// What the plan of this run decides from is the state returned here.
	r.data.sessions.put(r.data.run, m.ID.ValueString(), held, priorNodes(ctx, &m, &resp.Diagnostics))
	resp.Diagnostics.Append(dropLegacyMark(ctx, req.Private, resp.Private)...)
}

// bootsAnother marks the record of a node whose host runs its system
// after a passing verdict but boots another (boots: after goal test, or a
// boot entry changed by hand): its BootloaderFinalized condition False,
// and a warning; the plan makes the boot entry (action boot-entry). The
// same host read again marks it the same, so a refresh after it changes
// nothing.
func bootsAnother(rec *deployStatusModel, p priorNode, boots string, goal deploy.Goal, now time.Time, diags *diag.Diagnostics) {
	name, sys := rec.Name.ValueString(), rec.System.ValueString()
	msg := fmt.Sprintf("node %s: the host runs %s after a passing verdict, but boots %s (its system profile, from which NixOS installs the default boot entry): a reboot would bring that back; the next apply makes %s the boot entry (action boot-entry)", name, sys, boots, sys)
	if goal == deploy.GoalBoot {
		msg = fmt.Sprintf("node %s: the host boots %s, not %s, which the last deploy made its boot entry (its system profile, from which NixOS installs the default boot entry, was changed since): the next apply makes %s the boot entry again", name, boots, sys, sys)
	}
	diags.AddWarning("Node "+name+" boots another system", msg)
	conds, err := deploy.ConditionTypes.Set(p.conds, conditions.Condition{Type: string(deploy.CondBootloader), Status: conditions.False, Reason: reasonBootsAnother,
		Message: msg, ObservedGeneration: rec.ObservedGeneration.ValueInt64()}, now)
	if err != nil {
		return
	}
	p.conds = conds
	markNotReady(rec, p, reasonBootsAnother, msg, now)
}

// Reasons of a node's Ready condition a refresh sets: the host was
// changed outside since the last apply left it converged.
const (
	reasonDrifted      = "Drifted"
	reasonBootsAnother = "BootsAnother"
)

// markNotReady sets the Ready condition of a node the refresh found
// changed outside False (reason, msg: what it runs or boots), so that its
// record no longer says the host runs its system as the last apply left
// it; its phase follows (Failed, in failed_nodes, until the next apply
// mends it). It says whether the record took it. The same host read again
// marks it the same: a refresh after it changes nothing.
func markNotReady(rec *deployStatusModel, p priorNode, reason, msg string, now time.Time) bool {
	conds, err := deploy.ConditionTypes.Set(p.conds, conditions.Condition{Type: deploy.ConditionReady, Status: conditions.False, Reason: reason,
		Message: msg, ObservedGeneration: rec.ObservedGeneration.ValueInt64()}, now)
	if err != nil {
		return false
	}
	rec.Conditions, rec.Phase = nodeConditionsValue(conds, false), types.StringValue(string(deploy.NodePhase(conds)))
	return true
}

// driftOver gives a node the refresh had found changed outside, and finds
// back as the last apply left it, the conditions of that success again.
// It says whether its record changed.
func driftOver(rec *deployStatusModel, p priorNode, goal deploy.Goal, now time.Time) bool {
	if !drifted(p.conds) {
		return false
	}
	conds, err := deploy.SucceededConditions(p.conds, rec.Name.ValueString(), goal, rec.ObservedGeneration.ValueInt64(), now)
	if err != nil {
		return false
	}
	rec.Conditions, rec.Phase = nodeConditionsValue(conds, false), types.StringValue(string(deploy.NodePhase(conds)))
	return true
}

// drifted says whether a node's Ready condition is one a refresh set for a
// host changed outside.
func drifted(conds []conditions.Condition) bool {
	c, ok := conditions.Find(conds, deploy.ConditionReady)
	return ok && c.Status == conditions.False && (c.Reason == reasonDrifted || c.Reason == reasonBootsAnother)
}

// settleUnknown settles the record of a node whose last deploy's outcome
// was not known, from what its host runs now (deploy.Settle): its phase,
// message and Ready condition; the step conditions stay as the apply left
// them, but for a success, which has them all. It returns the message,
// and false when the record cannot be settled (its conditions do not
// take the change).
func settleUnknown(rec *deployStatusModel, p priorNode, current deploy.Current, goal deploy.Goal, now time.Time, diags *diag.Diagnostics) (string, bool) {
	name := rec.Name.ValueString()
	phase, msg := deploy.Settle(goal, rec.System.ValueString(), rec.PreviousSystem.ValueString(), current)
	generation := rec.ObservedGeneration.ValueInt64()
	var conds []conditions.Condition
	var err error
	if phase == deploy.PhaseSucceeded {
		conds, err = deploy.SucceededConditions(p.conds, name, goal, generation, now)
	} else {
		reason := deploy.ReasonDeployFailed
		if phase == deploy.PhaseRolledBack {
			reason = deploy.ReasonRolledBack
		}
		conds, err = deploy.ConditionTypes.Set(p.conds, conditions.Condition{Type: deploy.ConditionReady, Status: conditions.False, Reason: reason, Message: msg, ObservedGeneration: generation}, now)
	}
	if err != nil {
		diags.AddWarning("Node "+name+" not settled", fmt.Sprintf("node %s: its record cannot take what the host says (%s); it stays as the last apply left it", name, err))
		return "", false
	}
	rec.Phase = types.StringValue(string(deploy.NodePhase(conds)))
	rec.Message = types.StringValue(msg)
	rec.Hint = types.StringValue("")
	if phase == deploy.PhaseSucceeded {
		// As an apply that saw the deploy end records it.
		rec.Action, rec.ExitCode = types.StringValue(actionSwitch), types.Int64Value(0)
	} else {
		rec.Hint = types.StringValue("the next apply retries this node")
	}
	rec.Conditions = nodeConditionsValue(conds, false)
	return msg, true
}

// settleDeployment derives the deployment's node lists, conditions and
// phase again from its records, once a refresh settled one: as the apply
// derives them, at the generation the apply observed.
func settleDeployment(ctx context.Context, m *deploymentModel, records []deployStatusModel, now time.Time, diags *diag.Diagnostics) {
	m.SucceededNodes, m.FailedNodes, m.SkippedNodes = deploySummaries(records)
	var names []string
	var phases []deploy.Phase
	for _, rec := range records {
		names, phases = append(names, rec.Name.ValueString()), append(phases, deploy.Phase(rec.Phase.ValueString()))
	}
	prior, _ := conditionsFrom(ctx, m.Conditions)
	conds, err := deploy.DeploymentConditions(prior, names, phases, m.ObservedGeneration.ValueInt64(), now)
	if err == nil {
		conds, err = deploymentKeysCondition(ctx, conds, m, records, m.ObservedGeneration.ValueInt64(), now)
	}
	if err != nil {
		diags.AddWarning("Deployment conditions not settled", err.Error()+"; the deployment's last conditions stand.")
		return
	}
	m.Conditions = conditionsValue(conds)
	m.Phase = deploymentPhase(conds)
}

// Delete forgets the deployment and removes its keys from the hosts;
// hosts keep running what they run.
func (r *deploymentResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m deploymentModel
	getDeployment(ctx, req.State.Get, &m, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	r.removeKeys(ctx, &m, &resp.Diagnostics)
}

// underProbeBound runs f(0) … f(n-1) at once, at most probe_concurrency
// of them (with every other probe of the provider process) at a time, and
// waits for them. Once ctx ends it starts no more: it returns how many it
// started, the first ones.
func (r *deploymentResource) underProbeBound(ctx context.Context, n int, f func(int)) int {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		if err := r.data.prober.Slots.Acquire(ctx, 1); err != nil {
			return i
		}
		wg.Go(func() {
			defer r.data.prober.Slots.Release(1)
			f(i)
		})
	}
	return n
}
