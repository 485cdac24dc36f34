terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

variable "hosts" {
  description = "SSH hosts by name, each with its pinned host key."
  type = map(object({
    host                 = string
    host_key_fingerprint = string
  }))
  default = {
    web1 = { host = "web1.example.org", host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s" }
  }
}

provider "fleet" {
  default_user     = "deploy"
  private_key_file = "~/.ssh/deploy_ed25519"
}

resource "fleet_executor" "host" {
  for_each = var.hosts

  name                 = each.key
  host                 = each.value.host
  host_key_fingerprint = each.value.host_key_fingerprint
}

data "fleet_reachability" "now" {
  targets = [for name, h in var.hosts : merge(h, { name = name })]
}

# A failed assertion is a warning in plan and apply, never an error: the
# pipeline goes on, and the reviewer reads which hosts are down.
check "fleet_reachable" {
  assert {
    condition     = data.fleet_reachability.now.all_reachable
    error_message = "Unreachable now: ${join(", ", data.fleet_reachability.now.unreachable_names)}"
  }
}

# The executors that are not reachable, with why, for a job to read from
# `terraform output -json unreachable`.
output "unreachable" {
  value = {
    for name, e in fleet_executor.host : name => "${e.reachability.reason}: ${e.reachability.message}"
    if e.reachability.state != "reachable"
  }
}
