terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

variable "hosts" {
  description = "Hosts by name: address, SSH port, pinned host key (its public key line), role and the system closure to run."
  type = map(object({
    host     = string
    port     = optional(number, 22)
    host_key = string
    role     = string
    system   = string
  }))
}

variable "ssh_key_file" {
  description = "Private key file authorised on every host."
  type        = string
}

provider "fleet" {
  private_key_file = var.ssh_key_file
  # Hosts read at once by one plan, across all resources: Terraform's own
  # -parallelism (10) is the natural match.
  probe_concurrency = 10
}

# One deployment per role: each rolls out on its own, ten hosts at a time,
# and stops starting hosts once more than two of its hosts have failed.
resource "fleet_ssh_deployment" "role" {
  for_each = toset([for h in values(var.hosts) : h.role])

  nodes = [
    for name, h in var.hosts : {
      name     = name
      host     = h.host
      host_key = h.host_key
      system   = h.system
      ssh_opts = ["Port=${h.port}"]
    } if h.role == each.key
  ]
  parallelism  = 10
  max_failures = 2
}

output "failed_nodes" {
  description = "Nodes whose last deploy failed, by role."
  value       = { for role, d in fleet_ssh_deployment.role : role => d.failed_nodes }
}
