terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

# User and credentials from the environment of the run, as a CI job sets
# them: FLEET_SSH_USER, FLEET_PRIVATE_KEY_FILE (or FLEET_PRIVATE_KEY). They
# are never written to state, so every refresh can log in.
provider "fleet" {}

variable "storage_root" {
  description = "Where the nodes keep their storage; check paths resolve under it."
  type        = string
  default     = "/srv/cloud"
}

variable "nodes" {
  description = "Nodes by name: their roles and how to reach them."
  type = map(object({
    roles                = list(string)
    host                 = string
    port                 = optional(number, 22)
    host_key_fingerprint = string
  }))
  default = {
    "sf-6" = { roles = ["hypervisor"], host = "sf-6.example.org", host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s" }
    "sf-7" = { roles = ["storage"], host = "sf-7.example.org", host_key_fingerprint = "SHA256:Yk3hbRM0vB0PzmjLOj0YfIWWxBf8aT8kSu3cVl2B8mI" }
  }
}

variable "clear_errors" {
  description = "Operator clears: node name to a note, added or changed once a fault is repaired."
  type        = map(string)
  default     = {}
}

# The policy in locals, so the resource and the data source are built from
# the same values and the data source depends on variables only.
locals {
  checks = {
    blobs     = { path = "blobs", description = "blob storage" }
    instances = { path = "instances", description = "instance storage" }
    uploads   = { path = "uploads", description = "upload storage" }
  }
  object_types = {
    instance = { checks = ["blobs", "instances"] }
    blob     = { checks = ["blobs"] }
    upload   = { checks = ["uploads"] }
  }
  roles = {
    hypervisor = { hosts = ["instance", "blob"], description = "a hypervisor node" }
    storage    = { hosts = ["blob", "upload"], description = "a storage node" }
  }
  nodes = {
    for name, n in var.nodes : name => {
      roles      = n.roles
      connection = { host = n.host, port = n.port, host_key_fingerprint = n.host_key_fingerprint }
    }
  }
}

# Memory: sticky errors, operator clears, heartbeats, conditions in state,
# warnings in every plan.
resource "fleet_node_health_policy" "cloud" {
  name         = "cloud"
  storage_root = var.storage_root
  checks       = local.checks
  object_types = local.object_types
  roles        = local.roles
  nodes        = local.nodes
  clear_errors = var.clear_errors
}

# Now, at plan: the feed for modules that must not place work on a node
# whose storage failed.
data "fleet_node_health" "now" {
  storage_root = var.storage_root
  checks       = local.checks
  object_types = local.object_types
  roles        = local.roles
  nodes        = local.nodes
}

# The data source is now, without memory: a node whose checks pass again is
# schedulable there while the resource still holds it in error. The
# scheduler keys its slots on the data source and reads the resource's
# error_nodes in attributes, where a value known only after apply is fine.
module "scheduler" {
  source = "./scheduler"
  nodes  = data.fleet_node_health.now.schedulable_nodes
  held   = fleet_node_health_policy.cloud.error_nodes
}

output "slots" {
  value = module.scheduler.slots
}

output "accepting" {
  value = module.scheduler.accepting
}

# Hold these back from deployments until an operator has cleared them.
output "error_nodes" {
  value = fleet_node_health_policy.cloud.error_nodes
}
