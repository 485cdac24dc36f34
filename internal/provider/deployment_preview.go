package provider

import (
	"sync"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

// heldSessions are the logins a deployment's refresh kept for the plan of
// the same run: the plan asks a switching node what the switch will do
// over the login that read it, so a plan logs in to each node once.
// A plan takes a deployment's sessions and ends them all; sessions no
// plan takes (a -refresh-only run) end after heldFor, or when the
// provider process ends.
type heldSessions struct {
	mu sync.Mutex
	m  map[runMarkKey]*heldSet
}

type heldSet struct {
	nodes map[string]heldNode
	timer *time.Timer
}

// heldNode is a node's session and the settings it logged in with.
type heldNode struct {
	settings deploy.Settings
	sess     *deploy.Session
}

// heldFor bounds how long a refresh's sessions wait for the plan.
const heldFor = 90 * time.Second

// put keeps a deployment's sessions, ending those an earlier refresh of
// the same run kept and no plan took.
func (h *heldSessions) put(run, id string, nodes map[string]heldNode) {
	key := runMarkKey{run, deploymentKind, id}
	set := &heldSet{nodes: nodes}
	h.mu.Lock()
	if h.m == nil {
		h.m = map[runMarkKey]*heldSet{}
	}
	old := h.m[key]
	h.m[key] = set
	set.timer = time.AfterFunc(heldFor, func() {
		if h.remove(key, set) {
			endSessions(set.nodes)
		}
	})
	h.mu.Unlock()
	// Whoever takes a set out of the map ends its sessions: put, take
	// or the timer.
	if old != nil {
		old.timer.Stop()
		endSessions(old.nodes)
	}
}

// take hands a deployment's sessions to its plan, which ends them.
func (h *heldSessions) take(run, id string) map[string]heldNode {
	key := runMarkKey{run, deploymentKind, id}
	h.mu.Lock()
	set := h.m[key]
	delete(h.m, key)
	h.mu.Unlock()
	if set == nil {
		return nil
	}
	set.timer.Stop()
	return set.nodes
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

// endSessions ends sessions at once: each ends when the host sees its
// standard input close.
func endSessions(nodes map[string]heldNode) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(n.sess.Close)
	}
	wg.Wait()
}
