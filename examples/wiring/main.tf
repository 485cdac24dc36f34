terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

# One map of hosts feeds everything below. Get each pin with
#   ssh-keyscan -t ed25519 -p 22 web1.example.org | ssh-keygen -lf -
# and check it out of band; the line it prints is accepted as it is.
variable "hosts" {
  description = "SSH hosts by name, each with its pinned host key."
  type = map(object({
    host                 = string
    port                 = optional(number, 22)
    user                 = optional(string)
    host_key_fingerprint = string
  }))
  default = {
    web1 = { host = "web1.example.org", host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s" }
    web2 = { host = "web2.example.org", host_key_fingerprint = "256 SHA256:Yk3hbRM0vB0PzmjLOj0YfIWWxBf8aT8kSu3cVl2B8mI web2.example.org (ED25519)" }
  }
}

variable "ssh_key_file" {
  description = "Private key file authorised on every host."
  type        = string
  default     = "~/.ssh/deploy_ed25519"
}

provider "fleet" {
  probe_interval = 60       # seconds between refresh probes; 0 = off
  default_user   = "deploy" # for hosts that name no user
  # Credentials in the provider block are never written to state, so every
  # refresh checks authentication with them.
  private_key_file = var.ssh_key_file
}

# One executor per host: its reachability record and conditions live in state.
resource "fleet_executor" "host" {
  for_each = var.hosts

  name                 = each.key
  host                 = each.value.host
  port                 = each.value.port
  user                 = each.value.user
  host_key_fingerprint = each.value.host_key_fingerprint
}

# Probed now, during plan. Fed from the same map as the executors, not from
# the executors: a data source that depends on a resource with pending
# changes is read only at apply, and what it feeds is unknown at plan.
data "fleet_reachability" "now" {
  targets = [for name, h in var.hosts : merge(h, { name = name })]
}

# A consumer: only the hosts that answer now join the pool, on the first
# apply too.
resource "terraform_data" "pool" {
  for_each = toset(data.fleet_reachability.now.reachable_names)
  input    = var.hosts[each.key].host
}

output "pool" {
  value = sort(keys(terraform_data.pool))
}
