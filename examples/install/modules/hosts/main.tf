# A local module that uses the provider: it names the source only (the
# same address as the root module's), and gets the version the root
# module chose.
terraform {
  required_providers {
    fleet = {
      source = "registry.terraform.io/fleetops/fleet"
    }
  }
}

variable "hosts" {
  description = "SSH hosts by name, each with its pinned host key."
  type = map(object({
    host                 = string
    port                 = optional(number, 22)
    host_key_fingerprint = string
  }))
}

resource "fleet_executor" "host" {
  for_each = var.hosts

  name                 = each.key
  host                 = each.value.host
  port                 = each.value.port
  host_key_fingerprint = each.value.host_key_fingerprint
}

data "fleet_reachability" "now" {
  targets = [for name, h in var.hosts : merge(h, { name = name })]
}

output "reachable_names" {
  description = "Hosts that answered the probe of this run."
  value       = data.fleet_reachability.now.reachable_names
}
