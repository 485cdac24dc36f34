package provider

import (
	"context"
	"encoding/json"

	"github.com/hashicorp/terraform-plugin-framework/diag"
)

// Warnings about observed problems appear in every run mode that reads the
// record (plan, apply, -refresh-only, -refresh=false), once each. Terraform
// calls different RPCs in each mode:
//
//	plan, apply        Read (refresh), then ModifyPlan, in one walk;
//	                   apply re-plans and applies changed resources in a
//	                   second walk
//	-refresh-only      Read only
//	-refresh=false     ModifyPlan only (then apply, for apply)
//
// So Read warns about the record it refreshed, ModifyPlan warns only when
// no refresh of its own walk did (it plans from a record read earlier), and
// Create or Update warn about a record they observed anew. Terraform
// configures a provider once per walk, so the walk is told by the
// configuration (providerData.walk), and a mark in private state says which
// walk last read or planned the resource.

const walkKey = "walk"

// What made a walk mark.
const (
	markedByRead = "read"
	markedByPlan = "plan"
)

type walkMark struct {
	Walk string `json:"walk,omitempty"`
	By   string `json:"by,omitempty"`
}

func readWalkMark(ctx context.Context, p privateGetter) walkMark {
	var m walkMark
	raw, _ := p.GetKey(ctx, walkKey)
	if len(raw) > 0 {
		// An unreadable mark is no mark: the worst outcome is one warning
		// shown twice.
		_ = json.Unmarshal(raw, &m)
	}
	return m
}

// setWalkMark records that this walk read or planned the resource; an empty
// by clears the mark (apply does, so a later -refresh=false plan warns).
func setWalkMark(ctx context.Context, p privateSetter, walk, by string) diag.Diagnostics {
	m := walkMark{}
	if by != "" {
		m = walkMark{Walk: walk, By: by}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		var d diag.Diagnostics
		d.AddError("Cannot save private state", err.Error())
		return d
	}
	return p.SetKey(ctx, walkKey, raw)
}

// planWarns reports whether a plan should warn about the record it keeps:
// not when a refresh of this walk read it (Read warned), and not when apply
// re-plans a plan made in an earlier walk (that plan warned).
func planWarns(m walkMark, walk string) bool {
	return m.Walk != walk && m.By != markedByPlan
}
