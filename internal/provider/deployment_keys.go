package provider

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

// actionKeys: in a plan and in state, the node's system stands and its
// keys are put in place (or removed) alone, then the units of the keys
// that changed are restarted.
const actionKeys = "keys"

type deployKeyModel struct {
	Destination  types.String `tfsdk:"destination"`
	User         types.String `tfsdk:"user"`
	Group        types.String `tfsdk:"group"`
	Permissions  types.String `tfsdk:"permissions"`
	Upload       types.String `tfsdk:"upload"`
	Nodes        types.List   `tfsdk:"nodes"`
	RestartUnits types.List   `tfsdk:"restart_units"`
}

// keyConf is a configured key and the nodes that get it (nil: every
// node). A key a part of which is not known yet (from another resource)
// has unknown set; nodesUnknown when which nodes get it is not known.
type keyConf struct {
	deploy.Key
	nodes                 map[string]bool
	unknown, nodesUnknown bool
}

// keyConfs are m's keys, by name, with their contents where contents
// holds them (nil contents: not known here, as in state). known is false
// while the keys as a whole are not known.
func keyConfs(ctx context.Context, m *deploymentModel, contents map[string]types.String) (confs []keyConf, known bool) {
	if m == nil || m.Keys.IsNull() {
		return nil, true
	}
	if m.Keys.IsUnknown() {
		return nil, false
	}
	elems := m.Keys.Elements()
	var diags diag.Diagnostics
	for _, name := range slices.Sorted(maps.Keys(elems)) {
		obj, ok := elems[name].(types.Object)
		if !ok || obj.IsNull() {
			continue
		}
		c := keyConf{Key: deploy.Key{Name: name}}
		if obj.IsUnknown() {
			c.unknown, c.nodesUnknown = true, true
			confs = append(confs, c)
			continue
		}
		var k deployKeyModel
		diags.Append(obj.As(ctx, &k, basetypes.ObjectAsOptions{UnhandledUnknownAsEmpty: true})...)
		c.Key = deploy.Key{Name: name, Path: orStr(k.Destination.ValueString(), "/run/keys/"+name), User: orStr(k.User.ValueString(), "root"),
			Group: orStr(k.Group.ValueString(), "root"), Mode: orStr(k.Permissions.ValueString(), "0400"),
			Upload: deploy.KeyUpload(orStr(k.Upload.ValueString(), string(deploy.UploadBeforeActivation)))}
		c.unknown = k.Destination.IsUnknown() || k.User.IsUnknown() || k.Group.IsUnknown() || k.Permissions.IsUnknown() || k.Upload.IsUnknown() || !fullyKnown(k.RestartUnits)
		c.nodesUnknown = !fullyKnown(k.Nodes)
		if !k.RestartUnits.IsNull() && fullyKnown(k.RestartUnits) {
			c.RestartUnits = stringsOf(ctx, k.RestartUnits, &diags)
		}
		if !k.Nodes.IsNull() && !c.nodesUnknown {
			c.nodes, _ = stringSet(ctx, k.Nodes, &diags)
		}
		if v, ok := contents[name]; ok && !v.IsUnknown() && !v.IsNull() {
			c.Content, c.ContentKnown = []byte(v.ValueString()), true
		}
		confs = append(confs, c)
	}
	return confs, true
}

// nodeKeys are the keys of confs node name gets, by name.
func nodeKeys(confs []keyConf, name string) []deploy.Key {
	var out []deploy.Key
	for _, c := range confs {
		if !c.nodesUnknown && (c.nodes == nil || c.nodes[name]) {
			out = append(out, c.Key)
		}
	}
	return out
}

// nodeKeysKnown says whether which keys node name gets, and where and
// whose each is, is known.
func nodeKeysKnown(confs []keyConf, name string) bool {
	for _, c := range confs {
		if c.nodesUnknown || c.unknown && (c.nodes == nil || c.nodes[name]) {
			return false
		}
	}
	return true
}

// keyContents are the keys' contents in the configuration, where a
// write-only attribute's value is; nil when none are set.
func keyContents(ctx context.Context, config tfsdk.Config, diags *diag.Diagnostics) map[string]types.String {
	var v types.Map
	diags.Append(config.GetAttribute(ctx, path.Root("key_contents_wo"), &v)...)
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	out := map[string]types.String{}
	for name, e := range v.Elements() {
		if s, ok := e.(types.String); ok {
			out[name] = s
		}
	}
	return out
}

// checkKeys refuses what the keys show wrong before any host is asked: a
// name that cannot be a file's, a node a key names that nodes lacks (seen
// holds the names known, nodesKnown whether they all are), a content for
// a key not configured, a key with none, two keys at one destination.
func checkKeys(ctx context.Context, m *deploymentModel, config tfsdk.Config, seen map[string]bool, nodesKnown bool, diags *diag.Diagnostics) {
	if m.Keys.IsUnknown() {
		return
	}
	byName := map[string]deployKeyModel{}
	if !m.Keys.IsNull() {
		for name, e := range m.Keys.Elements() {
			var k deployKeyModel
			if obj, ok := e.(types.Object); ok && !obj.IsUnknown() && !obj.IsNull() {
				diags.Append(obj.As(ctx, &k, basetypes.ObjectAsOptions{})...)
			} else {
				k = deployKeyModel{Destination: types.StringUnknown(), Nodes: types.ListUnknown(types.StringType)}
			}
			byName[name] = k
		}
	}
	at := func(name string) path.Path { return path.Root("keys").AtMapKey(name) }
	dests := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		k := byName[name]
		switch {
		case name == "" || name == "." || name == "..":
			diags.AddAttributeError(at(name), "Invalid key name", fmt.Sprintf("keys[%q]: a key's name names its file (/run/keys/<name> by default): give it a name such as db-password", name))
		case strings.ContainsAny(name, "/\n\x00"):
			diags.AddAttributeError(at(name), "Invalid key name", fmt.Sprintf("keys[%q]: a key's name cannot hold a slash: set destination for a path of its own, and name the key without one", name))
		}
		if dest := orStr(k.Destination.ValueString(), "/run/keys/"+name); !k.Destination.IsUnknown() {
			if other, ok := dests[dest]; ok {
				diags.AddAttributeError(at(name), "Two keys at one destination", fmt.Sprintf("keys[%q] and keys[%q] are both written to %s: give one a destination of its own", other, name, dest))
			}
			dests[dest] = name
		}
		if k.Upload.ValueString() == string(deploy.UploadAfterVerdict) && !m.Goal.IsUnknown() && m.Goal.ValueString() == string(deploy.GoalBoot) {
			diags.AddAttributeError(at(name).AtName("upload"), "After-verdict key without a verdict",
				fmt.Sprintf("keys[%q].upload = \"after-verdict\" puts the key in place once the new system passed its verdict, and goal \"boot\" judges nothing (it only makes the boot entry): set upload = \"before-activation\" (or leave it unset), or deploy with goal \"switch\" or \"test\"", name))
		}
		if nodesKnown && fullyKnown(k.Nodes) && !k.Nodes.IsNull() {
			var ignored diag.Diagnostics
			for _, n := range stringsOf(ctx, k.Nodes, &ignored) {
				if !seen[n] {
					diags.AddAttributeError(at(name).AtName("nodes"), "Unknown node in a key's nodes",
						fmt.Sprintf("keys[%q].nodes names %q, which is not in nodes (%s): correct the name, or leave nodes unset to give the key to every node", name, n, list(slices.Sorted(maps.Keys(seen)))))
				}
			}
		}
	}
	var contents types.Map
	diags.Append(config.GetAttribute(ctx, path.Root("key_contents_wo"), &contents)...)
	if contents.IsUnknown() || m.Keys.IsNull() && contents.IsNull() {
		return
	}
	given := contents.Elements()
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		if v, ok := given[name]; ok && v.IsNull() {
			diags.AddAttributeError(path.Root("key_contents_wo"), "Key without content",
				fmt.Sprintf("key_contents_wo[%q] is null: a key's content cannot be left out (an empty file is written only for \"\"); give it a value, or remove keys[%q]", name, name))
		}
		if _, ok := given[name]; !ok {
			diags.AddAttributeError(path.Root("key_contents_wo"), "Key without content",
				fmt.Sprintf("keys[%q] has no content: key_contents_wo needs an entry %q (key_contents_wo = { %q = var.%s }, or an ephemeral resource's value)", name, name, name, strings.ReplaceAll(name, "-", "_")))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(given)) {
		if _, ok := byName[name]; !ok {
			keys := "keys is empty"
			if len(byName) > 0 {
				keys = "keys has " + list(slices.Sorted(maps.Keys(byName)))
			}
			diags.AddAttributeError(path.Root("key_contents_wo"), "Content for no key",
				fmt.Sprintf("key_contents_wo has a content for %q, which keys does not name (%s): add keys[%q] (where and whose the file is), or correct the name", name, keys, name))
		}
	}
}

// keyNeeds is why a node's keys need the apply, as the plan decides it:
// from the configuration, from state (its KeysUploaded condition, which
// the refresh sets False for a key missing or owned otherwise on the
// host) and from the plan's look at the host (a key holding another
// content there). Empty: its keys are in place.
type keyNeeds struct {
	whys    []string // "db-password: missing on the host"
	removed []string // destinations of keys the node no longer has
	// unknown are keys whose content is not known at plan: the apply's
	// own plan, which knows it, decides (the action is unknown until
	// then, unless something else decides it).
	unknown []string
}

func (k keyNeeds) needed() bool { return len(k.whys) > 0 || len(k.removed) > 0 }

// nodePrefix is the "node NAME: " a condition's message starts with.
var nodePrefix = regexp.MustCompile(`^node [^:]+: `)

// keysOfNode compares a node's keys now (want) with those state has
// (had) and its KeysUploaded condition; look holds what the plan's look
// at the host found: what is wrong with a key, by name, and the keys the
// deployment wrote there that the node no longer has.
func keysOfNode(want, had []deploy.Key, conds []conditions.Condition, look nodeLook) keyNeeds {
	var k keyNeeds
	before := map[string]deploy.Key{}
	for _, h := range had {
		before[h.Name] = h
	}
	for _, w := range want {
		h, ok := before[w.Name]
		switch {
		case !ok:
			k.whys = append(k.whys, w.Name+": new")
		case h.Path != w.Path || h.User != w.User || h.Group != w.Group || h.Mode != w.Mode:
			k.whys = append(k.whys, w.Name+": its destination, owner or mode changed")
		case look.why[w.Name] != "":
			k.whys = append(k.whys, w.Name+": "+look.why[w.Name])
		case !w.ContentKnown:
			k.unknown = append(k.unknown, w.Name)
		}
	}
	if c, ok := conditions.Find(conds, string(deploy.CondKeys)); ok && c.Status != conditions.True && len(want) > 0 && len(k.whys) == 0 {
		// "node web1: the deploy did not reach its keys": the node's name
		// is the warning's, once for every node it names.
		k.whys = append(k.whys, nodePrefix.ReplaceAllString(c.Message, ""))
	}
	for _, h := range had {
		if !slices.ContainsFunc(want, func(w deploy.Key) bool { return w.Path == h.Path }) {
			k.removed = append(k.removed, h.Path)
		}
	}
	for _, p := range look.stale {
		if !slices.Contains(k.removed, p) {
			k.removed = append(k.removed, p)
		}
	}
	return k
}

// nodeLook is what the plan's look at a node's host found of its keys:
// why each key whose content is known here is not in place (by name), and
// the keys this deployment wrote there that no key of the node is written
// to now (stale: its record on the host names them).
type nodeLook struct {
	why   map[string]string
	stale []string
}

// keyLook asks each node's host, over the login this run's refresh kept
// for the plan, about the files of its keys whose content is known here,
// and returns, by node, why a key's file there is not as configured
// (missing, owned otherwise, of another mode, or holding another content:
// compared by digest, computed on the host, in memory here) and which
// files the deployment's record on the host names that no key of the node
// is written to now. A node with no key now is asked only when the
// refresh found the deployment's record on its host, or when the refresh
// did not read it because it was held (it was not deployed when keys
// may have changed). A node the refresh did not read (-refresh=false, and
// the apply's own plan, which must decide as the plan did) is asked over
// a login of its own. A node held now is not asked.
func (r *deploymentResource) keyLook(ctx context.Context, m *deploymentModel, nodes []deployNodeModel, priors map[string]priorNode,
	readNow map[string]deploy.Settings, held map[string]heldNode, hold map[string]bool, confs []keyConf) map[string]nodeLook {
	if !fullyKnown(m.Defaults) {
		return nil
	}
	var nd diag.Diagnostics
	defaults := r.defaults(ctx, m, &nd)
	type job struct {
		name     string
		settings deploy.Settings
		sess     *deploy.Session // the refresh's login; nil: log in now
		all      []deploy.Key    // the node's keys
		keys     []deploy.Key    // those whose content is known
		out      nodeLook
	}
	var jobs []*job
	for _, n := range nodes {
		if !fullyKnownNode(n) || !nodeKeysKnown(confs, n.Name.ValueString()) || hold[n.Name.ValueString()] {
			continue
		}
		name := n.Name.ValueString()
		all := nodeKeys(confs, name)
		var keys []deploy.Key
		for _, k := range all {
			if k.ContentKnown {
				keys = append(keys, k)
			}
		}
		j := &job{name: name, all: all, keys: keys, settings: r.settings(ctx, defaults, n, priors[name], &nd)}
		h, ok := held[name]
		if read, readOK := readNow[name]; ok && readOK && h.sess != nil && reflect.DeepEqual(read, j.settings) && reflect.DeepEqual(h.settings, j.settings) {
			j.sess = h.sess
		}
		switch {
		case len(keys) > 0:
		case j.sess != nil && j.sess.Current.HasKeys(m.ID.ValueString()):
			// No key now, but the host keeps the deployment's record of
			// keys it wrote there.
		case j.sess == nil && priors[name].action == actionSkip:
			// Held at the last apply, and not read since: its host may
			// keep keys removed meanwhile.
		default:
			continue
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil
	}
	d, cleanup, err := r.deployer(ctx, m)
	if err != nil {
		return nil
	}
	defer cleanup()
	r.underProbeBound(ctx, len(jobs), func(i int) {
		j := jobs[i]
		lctx, cancel := context.WithTimeout(ctx, previewTimeout)
		defer cancel()
		var h deploy.KeysOnHost
		var err error
		if j.sess != nil {
			h, err = j.sess.KeyStates(lctx, j.keys)
		} else {
			// Not read by this run's refresh (-refresh=false, or the
			// apply's own plan): asked over a login of its own.
			h, err = d.KeyStatesOf(lctx, j.settings, j.keys)
		}
		if err != nil {
			tflog.Debug(ctx, "a node's key files could not be read", map[string]any{"node": j.name, "error": err.Error()})
			return
		}
		for i, k := range j.keys {
			if why := k.Why(h.States[i]); why != "" {
				if j.out.why == nil {
					j.out.why = map[string]string{}
				}
				j.out.why[k.Name] = why
			}
		}
		j.out.stale = deploy.StaleKeys(j.all, h)
	})
	out := map[string]nodeLook{}
	for _, j := range jobs {
		if j.out.why != nil || len(j.out.stale) > 0 {
			out[j.name] = j.out
		}
	}
	return out
}

// warnKeys says, once for each key and why, which nodes' hosts the apply
// puts it on, and which keys it removes from which hosts.
func warnKeys(needs map[string]keyNeeds, order []string, diags *diag.Diagnostics) {
	byWhy := map[string][]string{}
	var whys []string
	removed := map[string][]string{}
	var paths []string
	for _, name := range order {
		for _, why := range needs[name].whys {
			if byWhy[why] == nil {
				whys = append(whys, why)
			}
			byWhy[why] = append(byWhy[why], name)
		}
		for _, p := range needs[name].removed {
			if removed[p] == nil {
				paths = append(paths, p)
			}
			removed[p] = append(removed[p], name)
		}
	}
	for _, why := range whys {
		key, reason, _ := strings.Cut(why, ": ")
		names := byWhy[why]
		title := "Key " + key + " will be put on " + nodesPhrase(names)
		if strings.HasPrefix(reason, deploy.KeyRefused) {
			// Its path breaks the rule of a key's path: the apply fails
			// the node, naming why.
			title = "Key " + key + " will be refused on " + nodesPhrase(names)
		}
		if strings.HasPrefix(why, "key ") || !strings.Contains(why, ": ") {
			// The refresh's word (the KeysUploaded condition's message),
			// or the record's (the deploy did not reach its keys).
			title, reason = "Keys will be put in place on "+nodesPhrase(names), why
		}
		diags.AddAttributeWarning(path.Root("keys"), title, fmt.Sprintf("%s: %s.", strings.Join(names, ", "), strings.TrimRight(reason, ".")))
	}
	for _, p := range paths {
		names := removed[p]
		diags.AddAttributeWarning(path.Root("keys"), "Key "+p+" will be removed from "+nodesPhrase(names),
			fmt.Sprintf("No key of the configuration is written to %s on %s any more: the apply removes the file from the host.", p, strings.Join(names, ", ")))
	}
}

// nodesPhrase names nodes for a title: "node db1", "3 nodes".
func nodesPhrase(names []string) string {
	if len(names) == 1 {
		return "node " + names[0]
	}
	return fmt.Sprintf("%d nodes", len(names))
}

// keyChanges are what a plan found of the keys: configured now (keys),
// in state (prior), and what each node's need (needs).
type keyChanges struct {
	keys, prior []keyConf
	needs       map[string]keyNeeds
}

// planned are the conditions a node's success records, with its
// KeysUploaded as the apply sets it: True when the node has keys and the
// deploy puts them in place (goal dry-activate puts none), gone when it
// has none and the deploy removed its last ones, else as they were.
func (kc keyChanges) planned(ctx context.Context, conds types.List, name, action string, goal deploy.Goal, generation types.Int64) types.List {
	if conds.IsUnknown() || generation.IsUnknown() || goal == deploy.GoalDryActivate || action == actionSkip {
		return conds
	}
	want, had := nodeKeys(kc.keys, name), nodeKeys(kc.prior, name)
	if len(want) == 0 && len(had) == 0 {
		return conds
	}
	cs, d := nodeConditionsFrom(ctx, conds, generation)
	if d.HasError() {
		return types.ListUnknown(nodeConditionObjectType)
	}
	cs, err := deploy.KeysCondition(cs, name, len(want) > 0, &deploy.Outcome{Passed: true, Reason: "Uploaded", Message: deploy.KeysInPlace}, generation.ValueInt64(), time.Time{})
	if err != nil {
		return types.ListUnknown(nodeConditionObjectType)
	}
	return nodeConditionsValue(cs, true)
}

// reasonKeysNotInPlace is the reason of a KeysUploaded condition a
// refresh set False: a key missing, or owned otherwise, on the host.
const reasonKeysNotInPlace = "NotInPlace"

// keysRead records what a refresh found at a node's key destinations
// (keys as state has them: their contents are not known here, so only
// whether each is there, whose and of which mode): KeysUploaded False
// when one is not in place, naming it and why (the next plan puts it
// back: action keys), and gone again once every key is, after a refresh
// had found one was not. Unchanged otherwise, so that a refresh of a
// fleet with its keys in place writes nothing. It says whether it changed
// the record.
func keysRead(rec *deployStatusModel, keys []deploy.Key, states []deploy.KeyState, now time.Time) bool {
	var whys []string
	for i, k := range keys {
		if why := k.Why(states[i]); why != "" {
			whys = append(whys, fmt.Sprintf("key %s: %s", k.Name, why))
		}
	}
	base, d := nodeConditionsFrom(context.Background(), rec.Conditions, rec.ObservedGeneration)
	if d.HasError() {
		return false
	}
	c, had := conditions.Find(base, string(deploy.CondKeys))
	var o *deploy.Outcome
	switch {
	case len(whys) > 0:
		// The plan says it (warnKeys), with what the apply does.
		o = &deploy.Outcome{Reason: reasonKeysNotInPlace, Message: strings.Join(whys, "; ")}
	case had && c.Status == conditions.False && c.Reason == reasonKeysNotInPlace:
		o = &deploy.Outcome{Passed: true, Reason: "Uploaded", Message: deploy.KeysInPlace}
	default:
		return false
	}
	if had && c.Status == conditions.False && c.Message == o.Message {
		return false // read the same again: nothing new
	}
	conds, err := deploy.KeysCondition(base, rec.Name.ValueString(), true, o, rec.ObservedGeneration.ValueInt64(), now)
	if err != nil {
		return false
	}
	rec.Conditions = nodeConditionsValue(conds, false)
	return true
}

// deploymentKeysCondition sets the deployment's KeysUploaded from its
// records (deploy.DeploymentKeysCondition): none while m has no keys.
func deploymentKeysCondition(ctx context.Context, conds []conditions.Condition, m *deploymentModel, records []deployStatusModel, generation int64, now time.Time) ([]conditions.Condition, error) {
	hasKeys := !m.Keys.IsNull() && !m.Keys.IsUnknown() && len(m.Keys.Elements()) > 0
	var notInPlace []string
	for _, rec := range records {
		cs, _ := nodeConditionsFrom(ctx, rec.Conditions, rec.ObservedGeneration)
		if _, ok := conditions.Find(cs, string(deploy.CondKeys)); ok {
			notInPlace = append(notInPlace, rec.Name.ValueString())
		}
	}
	return deploy.DeploymentKeysCondition(conds, hasKeys, notInPlace, generation, now)
}

// removalTargets are the deploys that remove the keys m put on the hosts
// of its nodes that keep (nil: all of them): each under its host's deploy
// lock, with the settings m has for it. A node with keys in m removes them
// (and whatever else the deployment's record on its host names); a node
// without, whose last apply did not deploy it (held, failed, interrupted,
// left out), may still keep keys removed while it was not deployed: its
// host's record says, and they go too.
func (r *deploymentResource) removalTargets(ctx context.Context, m *deploymentModel, keep func(name string) bool) []deploy.Target {
	if r.data == nil {
		return nil
	}
	confs, _ := keyConfs(ctx, m, nil)
	var diags diag.Diagnostics
	defaults := r.defaults(ctx, m, &diags)
	priors := priorNodes(ctx, m, &diags)
	var targets []deploy.Target
	for _, n := range r.nodes(ctx, m, &diags) {
		name := n.Name.ValueString()
		var paths []string
		for _, k := range nodeKeys(confs, name) {
			paths = append(paths, k.Path)
		}
		p := priors[name]
		undeployed := p.action == actionSkip || p.phase != string(deploy.PhaseSucceeded)
		if len(paths) == 0 && !undeployed || n.Name.IsUnknown() || keep != nil && !keep(name) {
			continue
		}
		targets = append(targets, deploy.Target{System: n.System.ValueString(), Settings: r.settings(ctx, defaults, n, priors[name], &diags), KeysOnly: true, RemovedKeys: paths})
	}
	return targets
}

// leavingKeys are the deploys that remove their keys from the hosts of
// the nodes state has and the configuration no longer lists.
func (r *deploymentResource) leavingKeys(ctx context.Context, prior *deploymentModel, a applyPlan) []deploy.Target {
	if prior == nil {
		return nil
	}
	now := map[string]bool{}
	for _, n := range a.nodes {
		now[n.Name.ValueString()] = true
	}
	return r.removalTargets(ctx, prior, func(name string) bool { return !now[name] })
}

// warnKeysLeft warns, for each removal that did not succeed, that its
// host keeps the keys, naming them: the node's record goes all the same.
func warnKeysLeft(id string, targets []deploy.Target, results []deploy.Result, diags *diag.Diagnostics) {
	for i, t := range targets {
		if i < len(results) && results[i].Phase == deploy.PhaseSucceeded {
			continue
		}
		why := "it was not reached"
		if i < len(results) {
			why = strings.TrimRight(results[i].Message, ".")
		}
		if len(t.RemovedKeys) == 0 {
			// A node with no key of the configuration, which may keep keys
			// removed while it was not deployed.
			diags.AddWarning("Node "+t.Name+" keys not checked",
				fmt.Sprintf("node %s: %s, so whether its host keeps keys this deployment wrote there while the node was not deployed is not known: its host's record of them is %s.", t.Name, why, agreement.KeyRecord(id)))
			continue
		}
		diags.AddWarning("Node "+t.Name+" keys not removed",
			fmt.Sprintf("node %s: %s, so its host keeps its keys (%s): remove them by hand (rm -f), as this deployment no longer has the node.", t.Name, why, strings.Join(t.RemovedKeys, ", ")))
	}
}

// removeKeys removes a destroyed deployment's keys from its hosts. A host
// where that fails is warned about, naming the files left: the deployment
// is gone all the same.
func (r *deploymentResource) removeKeys(ctx context.Context, m *deploymentModel, diags *diag.Diagnostics) {
	targets := r.removalTargets(ctx, m, nil)
	if len(targets) == 0 {
		return
	}
	ctx, stop := r.applyContext(ctx, "delete", 10*time.Minute)
	defer stop()
	d, cleanup, err := r.deployer(ctx, m)
	if err != nil {
		warnKeysLeft(m.ID.ValueString(), targets, nil, diags)
		return
	}
	defer cleanup()
	warnKeysLeft(m.ID.ValueString(), targets, d.Deploy(ctx, targets, nil), diags)
}

// warnKeysLeaving says which keys the apply removes from the hosts of the
// nodes that leave the deployment (in state, not in seen).
func warnKeysLeaving(priorKeys []keyConf, priors map[string]priorNode, seen map[string]bool, diags *diag.Diagnostics) {
	var lines []string
	for _, name := range slices.Sorted(maps.Keys(priors)) {
		if seen[name] {
			continue
		}
		var paths []string
		for _, k := range nodeKeys(priorKeys, name) {
			paths = append(paths, k.Path)
		}
		if len(paths) > 0 {
			lines = append(lines, name+": "+strings.Join(paths, ", "))
		}
	}
	if len(lines) > 0 {
		diags.AddAttributeWarning(path.Root("keys"), "Keys will be removed from the nodes that leave",
			"The apply removes the keys this deployment put on the hosts of the nodes it no longer has, under each host's deploy lock (a host it cannot reach keeps them, with a warning):\n  "+strings.Join(lines, "\n  "))
	}
}

// warnKeysDestroyed says which keys destroying a deployment removes from
// which hosts.
func warnKeysDestroyed(confs []keyConf, nodes []deployNodeModel, diags *diag.Diagnostics) {
	var lines []string
	for _, c := range confs {
		var names []string
		for _, n := range nodes {
			if c.nodes == nil || c.nodes[n.Name.ValueString()] {
				names = append(names, n.Name.ValueString())
			}
		}
		if len(names) > 0 {
			lines = append(lines, fmt.Sprintf("%s (%s) from %s", c.Name, c.Path, strings.Join(names, ", ")))
		}
	}
	if len(lines) == 0 {
		return
	}
	diags.AddAttributeWarning(path.Root("keys"), "Deployment destroyed: its keys will be removed from the hosts",
		"Destroying the deployment removes the keys it put on its hosts, each under its host's deploy lock; a host that cannot be reached keeps its keys, and the destroy warns naming them:\n  "+strings.Join(lines, "\n  "))
}

// keysRecord is the record of a node whose keys alone an apply puts in
// place (action keys): its last deploy's record, which stands (what the
// host runs, the times and generation of that deploy), with the action,
// conditions (a KeysUploaded of its own gone, now that its keys are in
// place) and message (which keys it wrote, and when; unknown in a plan,
// which is also how the apply tells it from a record that stands) of this
// apply. A plan shows it as a few lines.
func keysRecord(last deployStatusModel, conds types.List, message types.String) deployStatusModel {
	rec := last
	rec.Action, rec.Conditions, rec.Message = types.StringValue(actionKeys), conds, message
	return rec
}

// namesKnown says whether every node's name is known.
func namesKnown(nodes []deployNodeModel) bool {
	for _, n := range nodes {
		if n.Name.IsUnknown() {
			return false
		}
	}
	return true
}
