// Command terraform-provider-fleet serves the fleet provider to Terraform and
// OpenTofu.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/fleetops/terraform-provider-fleet/internal/provider"
)

// version is set at release by goreleaser.
var version = "dev"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider with support for debuggers such as delve")
	flag.Parse()

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/fleetops/fleet",
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}
