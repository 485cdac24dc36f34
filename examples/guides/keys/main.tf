terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

provider "fleet" {}

variable "nodes" {
  description = "Nodes in deploy order, each as fleet_ssh_deployment's nodes takes it (name, host, host_key, system)."
}

# The secrets: from the environment (TF_VAR_db_password), from a secret
# store's ephemeral resource (key_contents_wo takes its value alike), never
# from a file in the repository. Ephemeral: Terraform keeps them in no
# state and no saved plan.
variable "db_password" {
  type      = string
  sensitive = true
  ephemeral = true
}

variable "api_token" {
  type      = string
  sensitive = true
  ephemeral = true
}

resource "fleet_ssh_deployment" "prod" {
  nodes = var.nodes
  keys = {
    # Read by PostgreSQL when it starts: in place before the activation.
    "db-password" = {
      user          = "postgres"
      group         = "postgres"
      permissions   = "0440"
      restart_units = ["postgresql.service"]
    }
    # Only for a system that passed its verdict, on one node.
    "api-token" = {
      destination = "/run/api/token"
      upload      = "after-verdict"
      nodes       = ["web1"]
    }
  }
  key_contents_wo = {
    "db-password" = var.db_password
    "api-token"   = var.api_token
  }
}
