package provider_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"go.uber.org/goleak"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start is the fake time acceptance tests begin at.
var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func factories(opts ...provider.Option) map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){"fleet": server(opts...)}
}

// server serves the provider in-process; it tells CLI commands apart by
// the session's count, as a real provider does by its parent process.
func server(opts ...provider.Option) func() (tfprotov6.ProviderServer, error) {
	opts = append([]provider.Option{provider.WithRunID(acctest.CurrentCommand)}, opts...)
	return providerserver.NewProtocol6WithError(provider.New("test", opts...)())
}

// hcl renders attributes as HCL assignments, in sorted key order; values are
// HCL expressions (quote strings with q).
func hcl(attrs map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		fmt.Fprintf(&b, "  %s = %s\n", k, attrs[k])
	}
	return b.String()
}

func q(s string) string { return fmt.Sprintf("%q", s) }
