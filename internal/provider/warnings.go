package provider

import (
	"context"
	"os"
	"strconv"
	"sync"

	"github.com/hashicorp/terraform-plugin-framework/diag"
)

// Warnings about observed problems appear in every run mode that reads the
// record (plan, apply, -refresh-only, -refresh=false). Terraform calls
// different RPCs in each mode, each walk in a provider process of its own:
//
//	plan, apply        Read (refresh), then ModifyPlan, in the plan walk;
//	                   apply plans changed resources again and applies
//	                   them in the apply walk
//	-refresh-only      Read only
//	-refresh=false     ModifyPlan only (then the apply walk, for apply)
//
// So Read warns about the record it refreshed, Create and Update about a
// record they observed anew, and ModifyPlan about the record it keeps only
// when no refresh of this run read it. The provider process remembers
// which resources its refreshes read (runMarks), in memory: a mark in
// private state changed the state at every run, and drift detection then
// flagged every resource at every run.
//
// The price: the apply walk is a process of its own, which does not know
// what the plan walk's refresh warned about. A resource that changes and
// keeps a record that needs a reviewer's eye (or is observed anew in the
// same state) is warned about once in each walk of an `apply`.

// runMarks remembers, per command and resource, what this process's
// refresh of the resource read or warned about. A run is told by the
// Terraform or OpenTofu process that started the provider (see parentRun),
// or by tests serving the provider in-process.
type runMarks struct {
	mu sync.Mutex
	m  map[runMarkKey]any
}

type runMarkKey struct{ run, kind, id string }

func (r *runMarks) set(run, kind, id string, v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[runMarkKey]any{}
	}
	r.m[runMarkKey{run, kind, id}] = v
}

func (r *runMarks) get(run, kind, id string) (any, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[runMarkKey{run, kind, id}]
	return v, ok
}

// refreshed records that this run's refresh read the resource kind/id;
// what it read or warned about, in v.
func (d *providerData) refreshed(kind, id string, v any) { d.marks.set(d.run, kind, id, v) }

// refreshedBy is what this run's refresh recorded of kind/id; false when
// no refresh of this run read it.
func (d *providerData) refreshedBy(kind, id string) (any, bool) { return d.marks.get(d.run, kind, id) }

// parentRun identifies the run by the process that started the provider:
// Terraform or OpenTofu starts a provider process per walk, all children
// of the one command's process.
func parentRun() string { return "pid:" + strconv.Itoa(os.Getppid()) }

// legacyRefreshedKey is the private state entry earlier versions wrote at
// every refresh; a refresh removes it once.
const legacyRefreshedKey = "refreshed"

type privateGetter interface {
	GetKey(context.Context, string) ([]byte, diag.Diagnostics)
}

type privateSetter interface {
	SetKey(context.Context, string, []byte) diag.Diagnostics
}

// dropLegacyMark removes the refresh mark earlier versions kept in private
// state, when there is one.
func dropLegacyMark(ctx context.Context, get privateGetter, set privateSetter) diag.Diagnostics {
	if raw, _ := get.GetKey(ctx, legacyRefreshedKey); len(raw) == 0 {
		return nil
	}
	return set.SetKey(ctx, legacyRefreshedKey, nil)
}
