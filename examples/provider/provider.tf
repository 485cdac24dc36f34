terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

provider "fleet" {
  # Probe each executor at most once a minute during refresh; 0 turns
  # refresh probing off (FLEET_PROBE_INTERVAL).
  probe_interval = 60

  # At most ten probes and host reads in flight in this provider process,
  # whoever asks (FLEET_PROBE_CONCURRENCY); ten is Terraform's default
  # -parallelism.
  probe_concurrency = 10

  # Jump hosts are verified here, accept-new: an unknown bastion is added,
  # a changed one refused (FLEET_KNOWN_HOSTS_FILE).
  known_hosts_file = "~/.ssh/known_hosts"

  # User for connections that name none (FLEET_SSH_USER).
  default_user = "deploy"
}
