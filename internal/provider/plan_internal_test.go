package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// A map of objects with an unknown field deep inside is not "changed"
// unless a known part differs: generation must not be planned higher when
// apply may find the same value.
func TestChangeOfNestedUnknowns(t *testing.T) {
	t.Parallel()
	obj := func(host attr.Value, port int64) attr.Value {
		return types.ObjectValueMust(map[string]attr.Type{"host": types.StringType, "port": types.Int64Type},
			map[string]attr.Value{"host": host, "port": types.Int64Value(port)})
	}
	nodes := func(elems map[string]attr.Value) attr.Value {
		return types.MapValueMust(types.ObjectType{AttrTypes: map[string]attr.Type{"host": types.StringType, "port": types.Int64Type}}, elems)
	}
	prior := nodes(map[string]attr.Value{"a": obj(types.StringValue("h"), 22)})
	cases := []struct {
		name    string
		planned attr.Value
		want    maybe
	}{
		{"equal", nodes(map[string]attr.Value{"a": obj(types.StringValue("h"), 22)}), no},
		{"known part differs", nodes(map[string]attr.Value{"a": obj(types.StringValue("h"), 2222)}), yes},
		{"unknown host, rest equal", nodes(map[string]attr.Value{"a": obj(types.StringUnknown(), 22)}), unknownYet},
		{"unknown host, port differs", nodes(map[string]attr.Value{"a": obj(types.StringUnknown(), 2222)}), yes},
		{"a node added", nodes(map[string]attr.Value{"a": obj(types.StringUnknown(), 22), "b": obj(types.StringValue("h"), 22)}), yes},
		{"whole map unknown", types.MapUnknown(types.ObjectType{AttrTypes: map[string]attr.Type{"host": types.StringType, "port": types.Int64Type}}), unknownYet},
	}
	for _, c := range cases {
		if got := changeOf([]attr.Value{c.planned}, []attr.Value{prior}); got != c.want {
			t.Errorf("%s: changeOf = %v, want %v", c.name, got, c.want)
		}
	}
}
