terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

# The fleet the drift job watches: one map of hosts feeds the executors,
# a node health policy over them and the deployment that switches them.
variable "hosts" {
  description = "Hosts by name: address, SSH port, the pinned host key (its public key line) and the system closure to run."
  type = map(object({
    host     = string
    port     = optional(number, 22)
    host_key = string
    system   = string
  }))
}

variable "ssh_key_file" {
  description = "Private key file authorised on every host."
  type        = string
}

variable "storage_root" {
  description = "Directory of the storage each host must keep writable."
  type        = string
  default     = "/srv/cloud"
}

provider "fleet" {
  probe_interval   = 300 # a refresh probes an executor whose record is older
  private_key_file = var.ssh_key_file
}

resource "fleet_executor" "host" {
  for_each = var.hosts

  name                 = each.key
  host                 = each.value.host
  port                 = each.value.port
  host_key_fingerprint = each.value.host_key
}

resource "fleet_node_health_policy" "storage" {
  name         = "storage"
  storage_root = var.storage_root
  checks       = { data = { path = "data", description = "data storage" } }
  object_types = { volume = { checks = ["data"] } }
  roles        = { storage = { hosts = ["volume"] } }
  nodes = {
    for name, h in var.hosts : name => { roles = ["storage"], connection = fleet_executor.host[name].ssh_connection }
  }
}

resource "fleet_ssh_deployment" "fleet" {
  defaults = { private_key_file = var.ssh_key_file }
  nodes = [
    for name, h in var.hosts : { name = name, host = h.host, host_key = h.host_key, system = h.system, ssh_opts = ["Port=${h.port}"] }
  ]
  # A node whose storage is in error is not switched.
  hold = fleet_node_health_policy.storage.error_nodes

  lifecycle {
    # An apply that leaves a node failed fails anyway; this names them in
    # the apply's output for whoever reads the CI log.
    postcondition {
      condition     = length(self.failed_nodes) == 0
      error_message = "Nodes failed their deploy: ${join(", ", self.failed_nodes)}."
    }
  }
}

# Checks are alerts: a failed assertion is a warning in every plan, the
# drift job's included, and never stops an apply.
check "hosts_reachable" {
  assert {
    condition     = alltrue([for e in fleet_executor.host : e.reachability.state != "unreachable"])
    error_message = "Unreachable: ${join(", ", [for name, e in fleet_executor.host : name if e.reachability.state == "unreachable"])}."
  }
}

check "storage_healthy" {
  assert {
    condition     = length(fleet_node_health_policy.storage.error_nodes) + length(fleet_node_health_policy.storage.missing_nodes) == 0
    error_message = "Storage in error: ${join(", ", fleet_node_health_policy.storage.error_nodes)}; not reached: ${join(", ", fleet_node_health_policy.storage.missing_nodes)}."
  }
}
