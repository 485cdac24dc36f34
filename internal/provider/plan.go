package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Terraform holds a provider to its plan. A value planned known must come
// out of apply identical ("Provider produced inconsistent result after
// apply"), and a value computed from an input that is unknown at plan time
// must be planned unknown, or apply, seeing the input, computes another one
// ("Provider produced inconsistent final plan"). Every resource that
// observes something keeps two kinds of computed values:
//
//   - values derived from its inputs (generation, an exported connection):
//     unknown when an input they derive from is unknown;
//   - values that record an observation (the record, conditions,
//     observed_generation): unknown when apply may observe anew, and
//     otherwise exactly the prior state's, which apply writes back untouched.
//
// This file decides which is which, once for every resource; ModifyPlan of
// each resource calls it, and its apply calls the same decision again on the
// final plan, where every input is known.

// maybe is a plan-time answer: no, yes, or not known until apply.
type maybe int

const (
	no maybe = iota
	yes
	unknownYet
)

func maybeOf(b bool) maybe {
	if b {
		return yes
	}
	return no
}

// maybeBool reads a planned bool.
func maybeBool(v types.Bool) maybe {
	if v.IsUnknown() {
		return unknownYet
	}
	return maybeOf(v.ValueBool())
}

// and is yes when every answer is yes, no when any is no.
func and(ms ...maybe) maybe {
	out := yes
	for _, m := range ms {
		switch m {
		case no:
			return no
		case unknownYet:
			out = unknownYet
		case yes:
		}
	}
	return out
}

// or is yes when any answer is yes, no when every one is no.
func or(ms ...maybe) maybe {
	out := no
	for _, m := range ms {
		switch m {
		case yes:
			return yes
		case unknownYet:
			out = unknownYet
		case no:
		}
	}
	return out
}

// changeOf compares the planned inputs of a resource with their prior
// values, pairwise and to the last nested value: yes when a known part
// differs, unknownYet when the known parts are equal but some part is
// unknown, no when all are equal.
func changeOf(planned, prior []attr.Value) maybe {
	out := no
	for i, p := range planned {
		out = or(out, differs(p, prior[i]))
		if out == yes {
			return yes
		}
	}
	return out
}

// differs compares a planned value with a prior one (which is known).
func differs(p, prior attr.Value) maybe {
	if p.IsUnknown() {
		return unknownYet
	}
	if fullyKnown(p) || p.IsNull() || prior == nil || prior.IsNull() || prior.IsUnknown() {
		return maybeOf(!p.Equal(prior))
	}
	pairs := func(a, b map[string]attr.Value) maybe {
		if len(a) != len(b) {
			return yes
		}
		out := no
		for k, v := range a {
			w, ok := b[k]
			if !ok {
				return yes
			}
			out = or(out, differs(v, w))
		}
		return out
	}
	switch pv := p.(type) {
	case types.Map:
		if bv, ok := prior.(types.Map); ok {
			return pairs(pv.Elements(), bv.Elements())
		}
	case types.Object:
		if bv, ok := prior.(types.Object); ok {
			return pairs(pv.Attributes(), bv.Attributes())
		}
	case types.List:
		if bv, ok := prior.(types.List); ok {
			a, b := pv.Elements(), bv.Elements()
			if len(a) != len(b) {
				return yes
			}
			out := no
			for i := range a {
				out = or(out, differs(a[i], b[i]))
			}
			return out
		}
	}
	return unknownYet
}

// fullyKnown reports whether v and everything inside it is known.
func fullyKnown(v attr.Value) bool {
	if v.IsUnknown() {
		return false
	}
	if v.IsNull() {
		return true
	}
	var elems []attr.Value
	switch t := v.(type) {
	case types.Map:
		for _, e := range t.Elements() {
			elems = append(elems, e)
		}
	case types.List:
		elems = t.Elements()
	case types.Set:
		elems = t.Elements()
	case types.Object:
		for _, e := range t.Attributes() {
			elems = append(elems, e)
		}
	}
	for _, e := range elems {
		if !fullyKnown(e) {
			return false
		}
	}
	return true
}

// nextGeneration is the generation apply writes: the prior one, one more
// when the inputs change, unknown while that is not known.
func nextGeneration(prior types.Int64, change maybe) types.Int64 {
	switch change {
	case yes:
		return types.Int64Value(prior.ValueInt64() + 1)
	case unknownYet:
		return types.Int64Unknown()
	case no:
	}
	return prior
}

// planObserved is the planned value of an attribute that records an
// observation: unknown when apply may observe anew, else the prior state's.
func planObserved[T attr.Value](observe maybe, prior, unknown T) T {
	if observe == no {
		return prior
	}
	return unknown
}
