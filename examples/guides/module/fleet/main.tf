# A child module: the hosts of one role, their executors, and the names of
# those that answer now. It takes plain values, never another module's
# resources, so its outputs are known at plan.
terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

variable "hosts" {
  description = "SSH hosts by name, each with its pinned host key. May be empty."
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

output "records" {
  description = "Each executor's record, for dashboards and alerts."
  value       = { for name, e in fleet_executor.host : name => e.reachability }
}
