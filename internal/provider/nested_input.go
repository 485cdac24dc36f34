package provider

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// A nested input is a value operators write in HCL, with keys of its own:
// a deployment's nodes, its defaults, its verdict, a health policy's
// checks. Declared as a nested attribute, Terraform would convert an
// object to the attribute's type before the provider sees it, dropping
// every key the type does not have: `hots = "10.0.0.1"` or a misspelt
// verdict check would vanish without a word. So the schema takes these as
// dynamic attributes, which arrive as written, and nestedInput checks each
// key against a declaration, which is an ordinary framework attribute: it
// names an unknown key and the nearest valid one (by the distance
// Terraform's own "Did you mean" uses), refuses a missing required key and
// a value of the wrong kind, converts the value to the declared type (so
// the resource reads it as it would a nested attribute), runs the declared
// validators, and documents the keys.
type nestedInput struct {
	name string
	decl schema.Attribute
	// hints advise, for keys operators write that belong elsewhere, where
	// they go, instead of the nearest valid key.
	hints map[string]string
}

// attribute is the schema attribute that takes the input.
func (in nestedInput) attribute(required bool, description string) schema.DynamicAttribute {
	return schema.DynamicAttribute{Required: required, Optional: !required,
		MarkdownDescription: description + "\n\n  " + keysHeading + "\n\n" + keysMarkdown(in.decl, "  ")}
}

// typ is the type the input decodes to.
func (in nestedInput) typ() attr.Type { return in.decl.GetType() }

// decode checks v and converts it to the declared type: a null or unknown
// value (or part of one) stays null or unknown, of that type. Faults are
// errors on the input's attribute, each naming the path inside it.
func (in nestedInput) decode(ctx context.Context, v types.Dynamic, diags *diag.Diagnostics) attr.Value {
	d := &decoder{ctx: ctx, root: path.Root(in.name), unknownKeys: map[string]*unknownKey{}, hints: in.hints}
	var out attr.Value
	switch {
	case v.IsNull() || v.IsUnderlyingValueNull():
		out = nullOf(in.typ())
	case v.IsUnknown() || v.IsUnderlyingValueUnknown():
		out = unknownOf(in.typ())
	default:
		out = d.value(in.decl, v.UnderlyingValue(), d.root)
	}
	d.report(diags)
	return out
}

// decodeObject and decodeList are decode for inputs declared as an object
// or a list (of objects).
func (in nestedInput) decodeObject(ctx context.Context, v types.Dynamic, diags *diag.Diagnostics) types.Object {
	o, _ := in.decode(ctx, v, diags).(types.Object)
	return o
}

func (in nestedInput) decodeMap(ctx context.Context, v types.Dynamic, diags *diag.Diagnostics) types.Map {
	m, _ := in.decode(ctx, v, diags).(types.Map)
	return m
}

func (in nestedInput) decodeList(ctx context.Context, v types.Dynamic, diags *diag.Diagnostics) types.List {
	l, _ := in.decode(ctx, v, diags).(types.List)
	return l
}

type decoder struct {
	ctx   context.Context
	root  path.Path
	diags diag.Diagnostics
	// unknownKeys gathers each misspelt key once, with every place it was
	// found: the same typo in twenty nodes is one error.
	unknownKeys map[string]*unknownKey
	order       []string
	hints       map[string]string
}

type unknownKey struct {
	key, suggestion, hint, valid string
	where                        []string
}

func (d *decoder) fail(at path.Path, summary, format string, args ...any) {
	d.diags.AddAttributeError(d.root, summary, at.String()+": "+fmt.Sprintf(format, args...))
}

// report adds the faults to diags: each on the input's attribute, which
// both CLIs show with its line of configuration.
func (d *decoder) report(diags *diag.Diagnostics) {
	for _, id := range d.order {
		u := d.unknownKeys[id]
		where := u.where
		if len(where) > 3 {
			where = append(where[:3:3], fmt.Sprintf("and %d more", len(u.where)-3))
		}
		detail := fmt.Sprintf("An object key named %q is not expected in %s.", u.key, strings.Join(where, ", "))
		switch {
		case u.hint != "":
			detail += " " + u.hint
		case u.suggestion != "":
			detail += fmt.Sprintf(" Did you mean %q?", u.suggestion)
		}
		diags.AddAttributeError(d.root, "Unsupported key", detail+" Valid keys: "+u.valid+".")
	}
	diags.Append(d.diags...)
}

func (d *decoder) value(decl schema.Attribute, v attr.Value, at path.Path) attr.Value {
	typ := decl.GetType()
	if v == nil || v.IsNull() {
		return nullOf(typ)
	}
	if v.IsUnknown() {
		return unknownOf(typ)
	}
	switch decl := decl.(type) {
	case schema.StringAttribute:
		s, ok := asString(v)
		if !ok {
			d.fail(at, "Invalid value", "a string is expected, not %s", kindOf(v))
			return types.StringUnknown()
		}
		out := types.StringValue(s)
		for _, val := range decl.Validators {
			var resp validator.StringResponse
			val.ValidateString(d.ctx, validator.StringRequest{Path: at, PathExpression: at.Expression(), ConfigValue: out}, &resp)
			d.relay(at, resp.Diagnostics)
		}
		return out
	case schema.Int64Attribute:
		n, ok := asInt64(v)
		if !ok {
			d.fail(at, "Invalid value", "a whole number is expected, not %s", describe(v))
			return types.Int64Unknown()
		}
		out := types.Int64Value(n)
		for _, val := range decl.Validators {
			var resp validator.Int64Response
			val.ValidateInt64(d.ctx, validator.Int64Request{Path: at, PathExpression: at.Expression(), ConfigValue: out}, &resp)
			d.relay(at, resp.Diagnostics)
		}
		return out
	case schema.BoolAttribute:
		b, ok := asBool(v)
		if !ok {
			d.fail(at, "Invalid value", "true or false is expected, not %s", describe(v))
			return types.BoolUnknown()
		}
		return types.BoolValue(b)
	case schema.ListAttribute:
		elems, ok := asElements(v)
		if !ok {
			d.fail(at, "Invalid value", "a list is expected, not %s", kindOf(v))
			return unknownOf(typ)
		}
		elemDecl := schema.StringAttribute{}
		if decl.ElementType != types.StringType {
			panic(fmt.Sprintf("nestedInput: list of %s is not supported", decl.ElementType))
		}
		out := make([]attr.Value, len(elems))
		for i, e := range elems {
			out[i] = d.value(elemDecl, e, at.AtListIndex(i))
		}
		l := types.ListValueMust(types.StringType, out)
		for _, val := range decl.Validators {
			var resp validator.ListResponse
			val.ValidateList(d.ctx, validator.ListRequest{Path: at, PathExpression: at.Expression(), ConfigValue: l}, &resp)
			d.relay(at, resp.Diagnostics)
		}
		return l
	case schema.SingleNestedAttribute:
		return d.object(decl.Attributes, v, at)
	case schema.ListNestedAttribute:
		elems, ok := asElements(v)
		if !ok {
			d.fail(at, "Invalid value", "a list of objects is expected, not %s", kindOf(v))
			return unknownOf(typ)
		}
		out := make([]attr.Value, len(elems))
		for i, e := range elems {
			out[i] = d.value(schema.SingleNestedAttribute{Attributes: decl.NestedObject.Attributes}, e, at.AtListIndex(i))
		}
		return types.ListValueMust(decl.NestedObject.Type(), out)
	case schema.MapNestedAttribute:
		entries, ok := asEntries(v)
		if !ok {
			d.fail(at, "Invalid value", "an object of named entries is expected, not %s", kindOf(v))
			return unknownOf(typ)
		}
		out := make(map[string]attr.Value, len(entries))
		for k, e := range entries {
			out[k] = d.value(schema.SingleNestedAttribute{Attributes: decl.NestedObject.Attributes}, e, at.AtMapKey(k))
		}
		return types.MapValueMust(decl.NestedObject.Type(), out)
	}
	panic(fmt.Sprintf("nestedInput: %T is not supported", decl))
}

// object checks an object's keys against attrs and converts each value.
func (d *decoder) object(attrs map[string]schema.Attribute, v attr.Value, at path.Path) attr.Value {
	typ, ok := schema.SingleNestedAttribute{Attributes: attrs}.GetType().(types.ObjectType)
	if !ok {
		panic("nestedInput: a nested object's type is not an object type")
	}
	fields, isObject := asEntries(v)
	if !isObject {
		d.fail(at, "Invalid value", "an object is expected, not %s", kindOf(v))
		return types.ObjectUnknown(typ.AttrTypes)
	}
	valid := slices.Sorted(func(yield func(string) bool) {
		for k := range attrs {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range fields {
			if !yield(k) {
				return
			}
		}
	}) {
		if _, ok := attrs[k]; ok {
			continue
		}
		id := genericPath(at) + "\x00" + k
		u := d.unknownKeys[id]
		if u == nil {
			u = &unknownKey{key: k, suggestion: nearest(k, valid), hint: d.hints[k], valid: strings.Join(valid, ", ")}
			d.unknownKeys[id] = u
			d.order = append(d.order, id)
		}
		u.where = append(u.where, at.String())
	}
	out := make(map[string]attr.Value, len(attrs))
	for _, k := range valid {
		decl := attrs[k]
		fv, given := fields[k]
		if (!given || fv.IsNull()) && decl.IsRequired() {
			d.fail(at, "Missing required key", "%q is required", k)
		}
		out[k] = d.value(decl, fv, at.AtName(k))
	}
	return types.ObjectValueMust(typ.AttrTypes, out)
}

// relay adds a declared validator's diagnostics on the input's attribute,
// which the CLIs can point at; the validator's own text names the path.
func (d *decoder) relay(at path.Path, diags diag.Diagnostics) {
	for _, x := range diags {
		detail := x.Detail()
		if !strings.Contains(detail, at.String()) {
			detail = at.String() + ": " + detail
		}
		if x.Severity() == diag.SeverityError {
			d.diags.AddAttributeError(d.root, x.Summary(), detail)
		} else {
			d.diags.AddAttributeWarning(d.root, x.Summary(), detail)
		}
	}
}

// genericPath is at with list indexes and map keys left out, so that a
// key misspelt in every node is reported once.
func genericPath(at path.Path) string {
	var parts []string
	for _, s := range at.Steps() {
		if n, ok := s.(path.PathStepAttributeName); ok {
			parts = append(parts, string(n))
		}
	}
	return strings.Join(parts, ".")
}

// nearest is the valid key closest to k, when it is close enough to be
// what was meant (as Terraform suggests attribute names).
func nearest(k string, valid []string) string {
	best, dist := "", 3
	for _, v := range valid {
		if d := levenshtein.Distance(k, v, nil); d < dist {
			best, dist = v, d
		}
	}
	return best
}

func asString(v attr.Value) (string, bool) {
	switch v := v.(type) {
	case types.String:
		return v.ValueString(), true
	case types.Number:
		return v.ValueBigFloat().Text('f', -1), true
	case types.Bool:
		return strconv.FormatBool(v.ValueBool()), true
	}
	return "", false
}

func asInt64(v attr.Value) (int64, bool) {
	switch v := v.(type) {
	case types.Number:
		f := v.ValueBigFloat()
		if !f.IsInt() {
			return 0, false
		}
		n, acc := f.Int64()
		return n, acc == big.Exact
	case types.String:
		n, err := strconv.ParseInt(v.ValueString(), 10, 64)
		return n, err == nil
	}
	return 0, false
}

func asBool(v attr.Value) (bool, bool) {
	switch v := v.(type) {
	case types.Bool:
		return v.ValueBool(), true
	case types.String:
		b, err := strconv.ParseBool(v.ValueString())
		return b, err == nil && (v.ValueString() == "true" || v.ValueString() == "false")
	}
	return false, false
}

func asElements(v attr.Value) ([]attr.Value, bool) {
	switch v := v.(type) {
	case types.Tuple:
		return v.Elements(), true
	case types.List:
		return v.Elements(), true
	case types.Set:
		return v.Elements(), true
	}
	return nil, false
}

func asEntries(v attr.Value) (map[string]attr.Value, bool) {
	switch v := v.(type) {
	case types.Object:
		return v.Attributes(), true
	case types.Map:
		return v.Elements(), true
	}
	return nil, false
}

func kindOf(v attr.Value) string {
	switch v.(type) {
	case types.String:
		return "a string"
	case types.Number:
		return "a number"
	case types.Bool:
		return "a bool"
	case types.Tuple, types.List, types.Set:
		return "a list"
	case types.Object, types.Map:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func describe(v attr.Value) string {
	if s, ok := v.(types.String); ok {
		return strconv.Quote(s.ValueString())
	}
	return kindOf(v)
}

// nullOf and unknownOf are the null and unknown values of typ.
func nullOf(typ attr.Type) attr.Value {
	switch t := typ.(type) {
	case basetypes.ObjectType:
		return types.ObjectNull(t.AttrTypes)
	case basetypes.ListType:
		return types.ListNull(t.ElemType)
	case basetypes.MapType:
		return types.MapNull(t.ElemType)
	case basetypes.StringType:
		return types.StringNull()
	case basetypes.Int64Type:
		return types.Int64Null()
	case basetypes.BoolType:
		return types.BoolNull()
	}
	panic(fmt.Sprintf("nullOf: %T", typ))
}

// unknownOf is an unknown value of type typ (any type of the framework's
// or timetypes').
func unknownOf(typ attr.Type) attr.Value {
	ctx := context.Background()
	v, err := typ.ValueFromTerraform(ctx, tftypes.NewValue(typ.TerraformType(ctx), tftypes.UnknownValue))
	if err != nil {
		panic(fmt.Sprintf("unknownOf(%s): %v", typ, err))
	}
	return v
}

const keysHeading = "Keys (any other key is refused, naming the nearest valid one):"

// keysMarkdown documents the keys a declaration takes, as tfplugindocs
// documents a nested attribute's: a list item per key, nested objects
// indented under theirs.
func keysMarkdown(decl schema.Attribute, indent string) string {
	var attrs map[string]schema.Attribute
	switch d := decl.(type) {
	case schema.SingleNestedAttribute:
		attrs = d.Attributes
	case schema.ListNestedAttribute:
		attrs = d.NestedObject.Attributes
	case schema.MapNestedAttribute:
		attrs = d.NestedObject.Attributes
	default:
		return ""
	}
	names := make([]string, 0, len(attrs))
	for k := range attrs {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		ri, rj := attrs[names[i]].IsRequired(), attrs[names[j]].IsRequired()
		if ri != rj {
			return ri
		}
		return names[i] < names[j]
	})
	var b strings.Builder
	for _, k := range names {
		a := attrs[k]
		req := "Optional"
		if a.IsRequired() {
			req = "Required"
		}
		fmt.Fprintf(&b, "%s- `%s` (%s, %s) %s\n", indent, k, kindName(a), req, a.GetMarkdownDescription())
		b.WriteString(keysMarkdown(a, indent+"  "))
	}
	return b.String()
}

func kindName(a schema.Attribute) string {
	switch a := a.(type) {
	case schema.StringAttribute:
		return "String"
	case schema.Int64Attribute:
		return "Number"
	case schema.BoolAttribute:
		return "Boolean"
	case schema.ListAttribute:
		if a.ElementType == types.StringType {
			return "List of String"
		}
		return fmt.Sprintf("List of %s", a.ElementType)
	case schema.SingleNestedAttribute:
		return "Object"
	case schema.ListNestedAttribute:
		return "List of Objects"
	case schema.MapNestedAttribute:
		return "Map of Objects"
	}
	return fmt.Sprintf("%T", a)
}

// writtenValue is a typed value as a configuration writes it, for a
// dynamic attribute: lists become tuples and maps objects, and an
// object holds only the keys that are set.
func writtenValue(v attr.Value) types.Dynamic {
	w := written(v)
	if w == nil {
		return types.DynamicNull()
	}
	return types.DynamicValue(w)
}

func written(v attr.Value) attr.Value {
	if v == nil || v.IsNull() {
		return nil
	}
	if v.IsUnknown() {
		return types.DynamicUnknown()
	}
	object := func(entries map[string]attr.Value) attr.Value {
		vals, typs := map[string]attr.Value{}, map[string]attr.Type{}
		for k, e := range entries {
			if w := written(e); w != nil {
				vals[k], typs[k] = w, w.Type(context.Background())
			}
		}
		return types.ObjectValueMust(typs, vals)
	}
	switch v := v.(type) {
	case types.List:
		var vals []attr.Value
		var typs []attr.Type
		for _, e := range v.Elements() {
			w := written(e)
			if w == nil {
				w = types.DynamicNull()
			}
			vals, typs = append(vals, w), append(typs, w.Type(context.Background()))
		}
		return types.TupleValueMust(typs, vals)
	case types.Map:
		return object(v.Elements())
	case types.Object:
		return object(v.Attributes())
	case types.Int64:
		return types.NumberValue(big.NewFloat(float64(v.ValueInt64())))
	}
	return v
}
