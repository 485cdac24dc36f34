package provider

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Issue 14: the logins a refresh kept end before the plan only for the
// one deployment the configuration is: when two of the run's sets fit it,
// or only another run's does, none ends; when one does, only the nodes
// named end, and the plan's take gets the rest.
func TestEndUnaskedEndsOnlyTheOneSetThatFits(t *testing.T) {
	t.Parallel()
	tg := nixtest.NewTarget(t)
	tg.Boot(t, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}))
	control, err := deploy.NewControlDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(control) })
	d := &deploy.Deployer{Transport: &deploy.Transport{KnownHostsFile: filepath.Join(t.TempDir(), "known_hosts"), ControlDir: control}}
	s := deploy.Settings{Name: "n1", Host: tg.Host, User: tg.User, PrivateKeyFile: tg.ClientKeyFile, HostKey: tg.HostKey,
		SSHOpts: []string{"Port=" + strconv.Itoa(tg.Port), "IdentitiesOnly=yes"}}
	open := func() heldNode {
		t.Helper()
		sess, err := d.OpenSession(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		return heldNode{settings: s, sess: sess}
	}
	var h heldSessions
	t.Cleanup(func() {
		for _, id := range []string{"a", "b", "c"} {
			h.take("run", id).end()
			h.take("other run", id).end()
		}
	})
	h.put("run", "a", map[string]heldNode{"n1": open(), "n2": open()}, nil)
	h.put("run", "b", map[string]heldNode{"m1": open()}, nil)
	h.put("other run", "c", map[string]heldNode{"n1": open()}, nil)
	// fits says a set with node name is the configuration's, and that
	// its node n1 is not asked.
	fits := func(name string) func(map[string]heldNode, map[string]priorNode) ([]string, bool) {
		return func(nodes map[string]heldNode, _ map[string]priorNode) ([]string, bool) {
			_, ok := nodes[name]
			return []string{name}, ok
		}
	}
	both := func(map[string]heldNode, map[string]priorNode) ([]string, bool) { return []string{"n1", "m1"}, true }
	if got := h.endUnasked("run", both); got != nil {
		t.Errorf("two sets fit, and %v ended", got)
	}
	if got := h.endUnasked("run", fits("x1")); got != nil {
		t.Errorf("no set fits, and %v ended", got)
	}
	if got := h.endUnasked("run", fits("n1")); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("set a fits: ended %v, want [n1]", got)
	}
	a, b, c := h.take("run", "a"), h.take("run", "b"), h.take("other run", "c")
	if a.nodes["n1"].sess != nil || a.nodes["n2"].sess == nil {
		t.Errorf("set a: n1 not ended or n2 ended: %+v", a.nodes)
	}
	if b.nodes["m1"].sess == nil || c.nodes["n1"].sess == nil {
		t.Errorf("a set that does not fit, or another run's, lost a session")
	}
	for _, set := range []*heldSet{a, b, c} {
		set.end()
	}
}
