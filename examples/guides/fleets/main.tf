# A fleet in one state: one map of hosts feeds the executors, the node
# health policy, the NixOS configurations' systems (a flake in nixos/,
# nixosConfigurations.<host name>) and one deployment per role, each
# holding back its own nodes in error. Hosts added, retired or renamed,
# checks added and errors cleared each plan as a short change that names
# every switch.
terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

variable "hosts" {
  description = "Hosts by name (each named as its NixOS configuration): address, SSH port, pinned host key (its public key line), the role it is deployed with, and any further roles its health is checked for."
  type = map(object({
    host        = string
    port        = optional(number, 22)
    host_key    = string
    role        = string
    extra_roles = optional(list(string), [])
  }))
  validation {
    condition     = length(var.hosts) > 0
    error_message = "hosts is empty: list at least one host (a fleet of none has nothing to check or deploy)."
  }
}

variable "ssh_key_file" {
  description = "Private key file authorised for root on every host."
  type        = string
}

variable "clear_errors" {
  description = "Operator clears of node errors: node name to a note (\"disk replaced, ticket 4711\")."
  type        = map(string)
  default     = {}
}

variable "only_nodes" {
  description = "Deploy only these hosts in this apply (-var 'only_nodes=[\"web1\"]'); null deploys every host."
  type        = list(string)
  default     = null
}

provider "fleet" {
  default_user     = "root"
  private_key_file = var.ssh_key_file
  # Hosts read at once by one plan, across all resources: Terraform's own
  # -parallelism (10) is the natural match.
  probe_concurrency = 10
}

resource "fleet_executor" "host" {
  for_each = var.hosts

  name                 = each.key
  host                 = each.value.host
  port                 = each.value.port
  host_key_fingerprint = each.value.host_key
}

resource "fleet_node_health_policy" "fleet" {
  name = "fleet"
  checks = {
    nix_state = { path = "/nix/var/nix", description = "the Nix state directory" }
    sshd      = { systemd_unit = "sshd.service", description = "the SSH daemon" }
    nginx     = { systemd_unit = "nginx.service", description = "nginx" }
    postgres  = { systemd_unit = "postgresql.service", description = "PostgreSQL" }
  }
  object_types = {
    system   = { checks = ["nix_state", "sshd"] }
    site     = { checks = ["nginx"] }
    database = { checks = ["postgres"] }
  }
  roles = {
    web = { hosts = ["system", "site"], description = "a web node" }
    db  = { hosts = ["system", "database"], description = "a database node" }
  }
  nodes = {
    for name, h in var.hosts : name => {
      roles      = concat([h.role], h.extra_roles)
      connection = fleet_executor.host[name].ssh_connection
    }
  }
  # A clear left in the variable after its host was retired or renamed
  # names no node: dropped here rather than refused.
  clear_errors = { for name, note in var.clear_errors : name => note if contains(keys(var.hosts), name) }
}

# Known at plan: each host's system and derivation.
data "fleet_nixos_systems" "hosts" {
  flake = "path:${path.module}/nixos"
  names = keys(var.hosts)
}

# One deployment per role: each rolls out on its own, ten hosts at a time,
# and stops starting hosts once more than two of its hosts have failed.
resource "fleet_ssh_deployment" "role" {
  for_each = toset([for h in values(var.hosts) : h.role])

  nodes = [
    for name, h in var.hosts : {
      name       = name
      host       = h.host
      host_key   = h.host_key
      ssh_opts   = ["Port=${h.port}"]
      system     = data.fleet_nixos_systems.hosts.systems[name].system
      derivation = data.fleet_nixos_systems.hosts.systems[name].derivation
    } if h.role == each.key
  ]
  # This role's nodes in error only: a node of another role that turns
  # error, or is cleared, changes that role's deployment alone.
  hold = [for name in fleet_node_health_policy.fleet.error_nodes : name if try(var.hosts[name].role, null) == each.key]
  # A name not in hosts reaches every role's deployment, which refuses it
  # and lists the names it has.
  only_nodes   = var.only_nodes == null ? null : [for name in var.only_nodes : name if try(var.hosts[name].role, each.key) == each.key]
  parallelism  = 10
  max_failures = 2
}

output "failed_nodes" {
  description = "Nodes whose last deploy failed, by role."
  value       = { for role, d in fleet_ssh_deployment.role : role => d.failed_nodes }
}
