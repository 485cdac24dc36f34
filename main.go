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

	quietSDK(os.LookupEnv, os.Setenv)
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

// logSwitches are the variables with which Terraform, OpenTofu or a test
// asks for a provider's logs.
var logSwitches = []string{"TF_LOG", "TF_LOG_PROVIDER", "TF_LOG_SDK", "TF_LOG_SDK_PROTO", "TF_LOG_SDK_FRAMEWORK", "TF_ACC_LOG_PATH", "TF_LOG_PATH_MASK"}

// quietSDK turns the plugin SDK's own logging off when nobody asked for
// logs. Unless told otherwise the SDK logs at TRACE, and writes every
// line (thousands per plan of a large deployment, one per value of its
// nodes) to Terraform, which parses each and drops it: about a tenth of a
// 24-node plan. Any of logSwitches set leaves it as it is.
func quietSDK(lookup func(string) (string, bool), set func(string, string) error) {
	for _, name := range logSwitches {
		if v, ok := lookup(name); ok && v != "" {
			return
		}
	}
	_ = set("TF_LOG_SDK", "OFF")
}
