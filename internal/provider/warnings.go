package provider

import (
	"context"
	"encoding/json"
	"os"
	"strconv"

	"github.com/hashicorp/terraform-plugin-framework/diag"
)

// Warnings about observed problems appear in every run mode that reads the
// record (plan, apply, -refresh-only, -refresh=false), once each. Terraform
// calls different RPCs in each mode, each walk in a provider process of its
// own:
//
//	plan, apply        Read (refresh), then ModifyPlan, in the plan walk;
//	                   apply plans changed resources again and applies
//	                   them in the apply walk
//	-refresh-only      Read only
//	-refresh=false     ModifyPlan only (then the apply walk, for apply)
//
// So Read warns about the record it refreshed, Create and Update about a
// record they observed anew, and ModifyPlan about the record it keeps only
// when no refresh of this run read it. A mark in private state says which
// run last refreshed the resource; a run is told by the Terraform or
// OpenTofu process that started the provider, which is the same for every
// walk of one command and differs from one command to the next.
//
// One case shows a warning twice: `apply -refresh=false` that changes a
// failing executor, whose plan and final plan both see a record no refresh
// of this run read. Terraform's own output folds the two into one.

const refreshedKey = "refreshed"

type refreshMark struct {
	Run string `json:"run,omitempty"`
}

// parentRun identifies the run by the process that started the provider:
// Terraform or OpenTofu starts a provider process per walk, all children
// of the one command's process.
func parentRun() string { return "pid:" + strconv.Itoa(os.Getppid()) }

func readRefreshMark(ctx context.Context, p privateGetter) refreshMark {
	var m refreshMark
	raw, _ := p.GetKey(ctx, refreshedKey)
	if len(raw) > 0 {
		// An unreadable mark is no mark: the worst outcome is one warning
		// shown twice.
		_ = json.Unmarshal(raw, &m)
	}
	return m
}

// setRefreshMark records that run refreshed the resource; an empty run
// clears the mark (apply does, so that a later -refresh=false plan warns).
func setRefreshMark(ctx context.Context, p privateSetter, run string) diag.Diagnostics {
	raw, err := json.Marshal(refreshMark{Run: run})
	if err != nil {
		var d diag.Diagnostics
		d.AddError("Cannot save private state", err.Error())
		return d
	}
	return p.SetKey(ctx, refreshedKey, raw)
}

// planWarns reports whether a plan should warn about the record it keeps:
// only when no refresh of this run read it (that refresh warned).
func planWarns(m refreshMark, run string) bool { return m.Run != run }
