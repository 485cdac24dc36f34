# The demo fleet: the hosts of a local sandbox (make demo starts them and
# writes sandbox.auto.tfvars.json). It is a whole, runnable setup: point the
# variables at real hosts and it works the same way.
terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

variable "user" {
  description = "User to log in as on every host."
  type        = string
}

variable "client_key_file" {
  description = "Private key file authorised on every host and on the bastion."
  type        = string
}

variable "known_hosts_file" {
  description = "known_hosts file for the bastion (accept-new)."
  type        = string
}

variable "hosts" {
  description = "The fleet, by name."
  type = map(object({
    host                 = string
    port                 = number
    host_key_fingerprint = string
    proxy_jump           = optional(string)
  }))
}

provider "fleet" {
  known_hosts_file = var.known_hosts_file
  probe_interval   = 15
}

# One executor per host: each keeps its reachability record in state.
resource "fleet_executor" "host" {
  for_each = var.hosts

  name                 = each.key
  host                 = each.value.host
  port                 = each.value.port
  user                 = var.user
  private_key_file     = var.client_key_file
  host_key_fingerprint = each.value.host_key_fingerprint
  proxy_jump           = each.value.proxy_jump
}

# The same hosts probed now, during plan, without memory.
data "fleet_reachability" "now" {
  targets = [for name, h in var.hosts : {
    name                 = name
    host                 = h.host
    port                 = h.port
    user                 = var.user
    private_key_file     = var.client_key_file
    host_key_fingerprint = h.host_key_fingerprint
    proxy_jump           = h.proxy_jump
  }]
}

check "fleet_reachable" {
  assert {
    condition     = data.fleet_reachability.now.all_reachable
    error_message = "Unreachable now: ${join(", ", data.fleet_reachability.now.unreachable_names)}"
  }
}

output "executors" {
  description = "Each executor's record: state, reason, streak and message."
  value = {
    for name, e in fleet_executor.host : name => format("%-11s %-8s failures=%d %s",
    e.reachability.state, e.reachability.reason, e.reachability.consecutive_failures, e.reachability.message)
  }
}

output "reachable_now" {
  value = data.fleet_reachability.now.reachable_names
}

output "unreachable_now" {
  value = data.fleet_reachability.now.unreachable_names
}

# Node health: three storage nodes of the sandbox share one layout under
# storage_root; one is healthy, one has its uploads mount read-only, one has
# a hung instance storage. A node that is down is missing, not in error.
variable "storage_root" {
  description = "Where the storage nodes keep their storage."
  type        = string
}

variable "nodes" {
  description = "The storage nodes, by name."
  type = map(object({
    host                 = string
    port                 = number
    host_key_fingerprint = string
  }))
}

resource "fleet_node_health_policy" "cloud" {
  name          = "cloud"
  storage_root  = var.storage_root
  probe_timeout = "3s"

  checks = {
    blobs     = { path = "blobs", description = "blob storage" }
    instances = { path = "instances", description = "instance storage" }
    uploads   = { path = "uploads", description = "upload storage" }
    shell     = { command = "test -w /tmp", description = "a writable /tmp" }
  }
  object_types = {
    instance = { checks = ["blobs", "instances", "shell"] }
    blob     = { checks = ["blobs"] }
    upload   = { checks = ["uploads"] }
  }
  roles = {
    hypervisor = { hosts = ["instance", "blob"], description = "a hypervisor node" }
    storage    = { hosts = ["blob", "upload"], description = "a storage node" }
  }
  nodes = {
    for name, n in var.nodes : name => {
      roles = ["hypervisor", "storage"]
      connection = {
        host                 = n.host
        port                 = n.port
        user                 = var.user
        private_key_file     = var.client_key_file
        host_key_fingerprint = n.host_key_fingerprint
      }
    }
  }
}

output "node_health" {
  description = "Each node's state and reason."
  value       = { for name, s in fleet_node_health_policy.cloud.status : name => "${s.state}: ${s.reason}" }
}

output "schedulable_nodes" {
  value = fleet_node_health_policy.cloud.schedulable_nodes
}

# Deployment: two NixOS-like hosts of the sandbox, switched one after the
# other, to the systems of their NixOS configurations. The sandbox writes
# those (a flake, nixosConfigurations.<host>) and does not build them: the
# plan says what each switch will build, and the apply builds them first.
# web2's new system fails a unit: its verdict fails, it is rolled back, and
# the apply fails at the end, after web1 was switched.
variable "deploy_targets" {
  description = "NixOS-like hosts, in deploy order."
  type = list(object({
    name             = string
    host             = string
    port             = number
    host_key         = string
    private_key_file = string
    user             = string
    use_sudo         = bool
  }))
}

variable "nixos_flake" {
  description = "The flake of the deploy targets' NixOS configurations, one per target name."
  type        = string
}

variable "nixos_dir" {
  description = "The flake's directory: edit a configuration there (a unit in systems/<name>.json, a revision in configurations.nix), then plan."
  type        = string
}

# The configurations of the hosts deployed, evaluated during plan in one
# Nix process: each one's system and derivation, known at plan.
data "fleet_nixos_systems" "deploy" {
  flake = var.nixos_flake
  names = [for t in var.deploy_targets : t.name]
}

resource "fleet_ssh_deployment" "demo" {
  nodes = [for t in var.deploy_targets : {
    name             = t.name
    host             = t.host
    system           = data.fleet_nixos_systems.deploy.systems[t.name].system
    derivation       = data.fleet_nixos_systems.deploy.systems[t.name].derivation
    host_key         = t.host_key
    user             = t.user
    use_sudo         = t.use_sudo
    private_key_file = t.private_key_file
    ssh_opts         = ["Port=${t.port}"]
  }]
  verdict = {
    confirm_timeout = "5s"
    settle_timeout  = "5s"
  }
}

output "deployment" {
  description = "Each node's phase and message."
  value       = { for name, s in fleet_ssh_deployment.demo.status : name => "${s.phase}: ${s.message}" }
}

output "nixos_configurations" {
  description = "Where the deploy targets' configurations are: edit one, then plan."
  value       = var.nixos_dir
}
