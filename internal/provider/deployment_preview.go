package provider

import (
	"context"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

// heldSessions are the logins a deployment's refresh kept for the plan of
// the same run: the plan asks a switching node what the switch will do
// over the login that read it, so a plan logs in to each node once.
// A plan takes a deployment's sessions and ends them all; sessions no
// plan takes (a -refresh-only run) end after heldFor, or when the
// provider process ends. Those of nodes the plan will not ask about end
// as soon as the configuration shows it (endUnasked), while the plugin
// framework is still decoding the plan: ending two dozen logins at once
// takes the hosts a few hundred milliseconds.
type heldSessions struct {
	mu sync.Mutex
	m  map[runMarkKey]*heldSet
}

type heldSet struct {
	nodes map[string]heldNode
	// priors is what the state the refresh returned says of each node:
	// what the plan decides from.
	priors map[string]priorNode
	timer  *time.Timer
	early  sync.WaitGroup // sessions endUnasked is ending
}

// heldNode is a node's session and the settings it logged in with; a
// nil session has been ended early (the node was not to be asked).
type heldNode struct {
	settings deploy.Settings
	sess     *deploy.Session
}

// heldFor bounds how long a refresh's sessions wait for the plan.
const heldFor = 90 * time.Second

// put keeps a deployment's sessions, ending those an earlier refresh of
// the same run kept and no plan took.
func (h *heldSessions) put(run, id string, nodes map[string]heldNode, priors map[string]priorNode) {
	key := runMarkKey{run, deploymentKind, id}
	set := &heldSet{nodes: nodes, priors: priors}
	h.mu.Lock()
	if h.m == nil {
		h.m = map[runMarkKey]*heldSet{}
	}
	old := h.m[key]
	h.m[key] = set
	set.timer = time.AfterFunc(heldFor, func() {
		if h.remove(key, set) {
			set.end()
		}
	})
	h.mu.Unlock()
	// Whoever takes a set out of the map ends its sessions: put, take
	// or the timer.
	if old != nil {
		old.timer.Stop()
		old.end()
	}
}

// take hands a deployment's sessions to its plan, which ends them
// (heldSet.end; a nil set ends nothing).
func (h *heldSessions) take(run, id string) *heldSet {
	key := runMarkKey{run, deploymentKind, id}
	h.mu.Lock()
	set := h.m[key]
	delete(h.m, key)
	h.mu.Unlock()
	if set != nil {
		set.timer.Stop()
	}
	return set
}

// endUnasked ends, in the background, the sessions a plan will not use:
// unasked is given each set this run holds and says whether the set is
// the configuration's deployment and which of its nodes the plan will
// not ask about. Only when exactly one set is the configuration's are
// those ended (two deployments of the same hosts with the same settings
// leave both sets whole); the plan's take then gets the rest.
// It returns the names of the nodes whose sessions it ends.
func (h *heldSessions) endUnasked(run string, unasked func(nodes map[string]heldNode, priors map[string]priorNode) ([]string, bool)) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var found *heldSet
	var names []string
	for key, set := range h.m {
		if key.run != run || key.kind != deploymentKind {
			continue
		}
		ns, ok := unasked(set.nodes, set.priors)
		if !ok {
			continue
		}
		if found != nil {
			return nil
		}
		found, names = set, ns
	}
	if found == nil {
		return nil
	}
	ending := map[string]heldNode{}
	var ended []string
	for _, name := range names {
		if n := found.nodes[name]; n.sess != nil {
			ending[name] = n
			ended = append(ended, name)
			n.sess = nil
			found.nodes[name] = n
		}
	}
	found.early.Go(func() { endSessions(ending) })
	return ended
}

func (h *heldSessions) remove(key runMarkKey, set *heldSet) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[key] != set {
		return false
	}
	delete(h.m, key)
	return true
}

// end ends the set's sessions, and waits for those endUnasked ended.
func (s *heldSet) end() {
	if s == nil {
		return
	}
	endSessions(s.nodes)
	s.early.Wait()
}

// endSessions ends sessions at once: each ends when the host sees its
// standard input close.
func endSessions(nodes map[string]heldNode) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n.sess != nil {
			wg.Go(n.sess.Close)
		}
	}
	wg.Wait()
}

// endUnasked ends the sessions this run's refresh kept for deployment
// configuration m that its plan will not use: those of nodes whose action
// is known and is not a switch (nodeAction, as the plan decides it), and
// that have no keys (the plan asks their hosts about them). The
// refresh's set is the one whose every node is in m with the settings it
// logged in with; while a part of m that decides is unknown, nothing
// ends before the plan.
func (r *deploymentResource) endUnasked(ctx context.Context, m *deploymentModel, nodes []deployNodeModel) {
	if r.data == nil || m.Goal.IsUnknown() || !fullyKnown(m.Defaults) {
		return
	}
	var diags diag.Diagnostics
	seen := map[string]bool{}
	for _, n := range nodes {
		seen[n.Name.ValueString()] = true
	}
	sc := planScope(ctx, m, seen, &diags)
	defaults := r.defaults(ctx, m, &diags)
	if !sc.known || diags.HasError() {
		return
	}
	// The goal's default is the schema's: a plan sees it set.
	goal := deploy.Goal(orStr(m.Goal.ValueString(), string(deploy.GoalSwitch)))
	keys, keysKnown := keyConfs(ctx, m, nil)
	if !keysKnown {
		return
	}
	byName := map[string]deployNodeModel{}
	for _, n := range nodes {
		if !fullyKnownNode(n) {
			return
		}
		byName[n.Name.ValueString()] = n
	}
	ended := r.data.sessions.endUnasked(r.data.run, func(held map[string]heldNode, priors map[string]priorNode) ([]string, bool) {
		var unasked []string
		for name, h := range held {
			n, ok := byName[name]
			if !ok || !reflect.DeepEqual(r.settings(ctx, defaults, n, priors[name], &diags), h.settings) {
				return nil, false
			}
			p, known := priors[name]
			if len(nodeKeys(keys, name)) > 0 && goal != deploy.GoalDryActivate {
				continue // the plan asks its host about its keys (keyLook)
			}
			if a, kept := nodeAction(n, p, known, sc, goal); kept || a.ValueString() != actionSwitch {
				unasked = append(unasked, name)
			}
		}
		return unasked, len(held) > 0
	})
	if len(ended) > 0 {
		sort.Strings(ended)
		tflog.Debug(ctx, "ending the refresh's logins the plan will not use", map[string]any{"nodes": strings.Join(ended, ", ")})
	}
}
