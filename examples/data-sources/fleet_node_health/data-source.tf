# Evaluate now, without memory, from the same values a policy resource is
# built from (variables or locals), so the lists are known at plan.
locals {
  checks = {
    blobs   = { path = "/srv/cloud/blobs", description = "blob storage" }
    uploads = { path = "/srv/cloud/uploads", description = "upload storage" }
  }
  object_types = {
    blob   = { checks = ["blobs"] }
    upload = { checks = ["uploads"] }
  }
  roles = {
    storage = { hosts = ["blob", "upload"] }
  }
}

data "fleet_node_health" "storage" {
  checks       = local.checks
  object_types = local.object_types
  roles        = local.roles
  nodes = {
    "st-1" = {
      roles = ["storage"]
      connection = {
        host                 = "st-1.example.org"
        host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"
      }
    }
  }
}

output "schedulable" {
  value = data.fleet_node_health.storage.schedulable_nodes
}

# A policy resource's exported document works too, read at apply while that
# resource has pending changes: fine for outputs, not for for_each.
resource "fleet_node_health_policy" "storage" {
  name         = "storage"
  checks       = local.checks
  object_types = local.object_types
  roles        = local.roles
  nodes        = { "st-2" = { roles = ["storage"], local = true } }
}

data "fleet_node_health" "from_document" {
  policy = fleet_node_health_policy.storage.policy
}

output "st2_reason" {
  value = data.fleet_node_health.from_document.status["st-2"].reason
}
