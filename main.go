// Command terraform-provider-fleet serves the fleet provider to Terraform and
// OpenTofu.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/fleetops/terraform-provider-fleet/internal/provider"
)

// version is set at release by goreleaser.
var version = "dev"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider with support for debuggers such as delve")
	flag.Parse()

	var opts []provider.Option
	if !debug {
		// Terraform starts the provider in its own process group, so Ctrl-C
		// in a terminal reaches the provider too. go-plugin ignores it and
		// waits for Terraform to stop the provider, which `apply` does not
		// do while it plans: the interrupt itself ends the probes in flight.
		interrupted, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		opts = append(opts, provider.WithInterrupt(interrupted))
	}
	err := providerserver.Serve(context.Background(), provider.New(version, opts...), providerserver.ServeOpts{
		Address: "registry.terraform.io/fleetops/fleet",
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}
