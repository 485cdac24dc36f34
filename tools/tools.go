//go:build generate

// Package tools pins the code generators the provider uses, in their own
// module so the provider's go.mod does not carry their dependencies.
package tools

import (
	// Documentation generation.
	_ "github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs"
)

// Format examples, then generate docs/ from schemas, templates/ and examples/.
//go:generate terraform fmt -recursive ../examples/
//go:generate go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs generate --provider-dir .. --provider-name fleet
