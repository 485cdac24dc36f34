package provider

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
)

// Conditions come back from state as they went in: a resource's with the
// generation each holds, a deployment node's with the one its record holds.
func TestConditionsRoundTripThroughState(t *testing.T) {
	t.Parallel()
	in := []conditions.Condition{{Type: "Ready", Status: conditions.True, Reason: "Switched", Message: "node n1 runs its system",
		LastTransitionTime: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), ObservedGeneration: 3}}
	l := conditionsValue(in)
	if out, d := conditionsFrom(context.Background(), l); d.HasError() || len(out) != 1 || out[0] != in[0] {
		t.Errorf("a resource's conditions back from state: %v %v, want %v", out, d, in)
	}
	nl := nodeConditionsValue(in, false)
	if _, has := nl.Elements()[0].(types.Object).Attributes()["observed_generation"]; has {
		t.Errorf("a node's condition holds a generation: %v", nl)
	}
	if out, d := nodeConditionsFrom(context.Background(), nl, types.Int64Value(3)); d.HasError() || len(out) != 1 || out[0] != in[0] {
		t.Errorf("a node's conditions back from state: %v %v, want %v", out, d, in)
	}
}
