// Package deploy is the engine of fleet_ssh_deployment: it rolls NixOS
// system closures onto existing hosts over SSH, one host after the other,
// each with a verdict. It imports no framework code.
//
// This file set holds the parts that need no host: the layering of a node's
// SSH settings (built-in, then the deployment's defaults, then the node)
// and the validation of ssh_opts items.
package deploy
