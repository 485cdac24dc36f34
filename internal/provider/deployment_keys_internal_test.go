package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

// A node whose last deploy did not reach its keys (interrupted before
// them) plans them again, warned once for every such node with the
// record's word: the new-user trial read "Key node node02 will be put on
// node node02" / "node02: the deploy did not reach its keys".
func TestWarnKeysOfANodeTheDeployDidNotReach(t *testing.T) {
	t.Parallel()
	want := []deploy.Key{{Name: "db", Path: "/run/keys/db", User: "root", Group: "root", Mode: "0400", ContentKnown: true}}
	needs := map[string]keyNeeds{}
	for _, name := range []string{"n1", "n2"} {
		conds := []conditions.Condition{{Type: string(deploy.CondKeys), Status: conditions.Unknown, Reason: "NotReached", Message: "node " + name + ": the deploy did not reach its keys"}}
		needs[name] = keysOfNode(want, want, conds, nodeLook{})
	}
	var diags diag.Diagnostics
	warnKeys(needs, []string{"n1", "n2"}, &diags)
	if len(diags) != 1 {
		t.Fatalf("%d warnings, want one for both nodes: %v", len(diags), diags)
	}
	if got, want := diags[0].Summary(), "Keys will be put in place on 2 nodes"; got != want {
		t.Errorf("title %q, want %q", got, want)
	}
	if got, want := diags[0].Detail(), "n1, n2: the deploy did not reach its keys."; got != want {
		t.Errorf("detail %q, want %q", got, want)
	}
}
