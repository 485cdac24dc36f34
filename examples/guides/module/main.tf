terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

# User and credentials come from the environment of the run, as a CI job
# sets them: FLEET_SSH_USER, FLEET_PRIVATE_KEY_FILE (or FLEET_PRIVATE_KEY).
provider "fleet" {}

variable "roles" {
  description = "Hosts by role, then by name. A role with no hosts is fine."
  type = map(map(object({
    host                 = string
    port                 = optional(number, 22)
    host_key_fingerprint = string
  })))
  default = {
    web = {
      web1 = { host = "web1.example.org", host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s" }
    }
    batch = {}
  }
}

module "role" {
  source   = "./fleet"
  for_each = var.roles
  hosts    = each.value
}

# Known at plan on the first apply: the module's data source depends on
# variables only.
resource "terraform_data" "web_pool" {
  for_each = toset(module.role["web"].reachable_names)
  input    = var.roles["web"][each.key].host
}
