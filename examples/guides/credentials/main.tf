terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

variable "deploy_key" {
  description = "The deploy key, PEM; from your secret store (TF_VAR_deploy_key)."
  type        = string
  sensitive   = true
  ephemeral   = true # never saved, in state or in a plan file
}

# Provider configuration is evaluated at every run and never written to
# state: this key authenticates every refresh probe. FLEET_PRIVATE_KEY does
# the same from the environment.
provider "fleet" {
  private_key  = var.deploy_key
  default_user = "deploy"
}

# No key of its own: it uses the provider's, and every refresh checks that
# the host still accepts it.
resource "fleet_executor" "web1" {
  name                 = "web1"
  host                 = "web1.example.org"
  host_key_fingerprint = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s"
}

# A key of its own, write-only: checked when created and whenever the
# connection changes; a refresh cannot use it and says authentication was
# not re-checked (condition Authenticated Unknown, CredentialWithheld).
resource "fleet_executor" "legacy" {
  name                 = "legacy"
  host                 = "legacy.example.org"
  private_key          = var.deploy_key
  host_key_fingerprint = "SHA256:Yk3hbRM0vB0PzmjLOj0YfIWWxBf8aT8kSu3cVl2B8mI"
}
