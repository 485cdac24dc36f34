terraform {
  required_providers {
    fleet = {
      source = "fleetops/fleet"
    }
  }
}

provider "fleet" {
  # Jump hosts are verified against this file, accept-new: a bastion seen
  # for the first time is added (hashed if the file hashes its names), a
  # changed key is refused. A path you choose must be in a directory that
  # exists; the default, ~/.ssh/known_hosts, is created as OpenSSH does.
  known_hosts_file = "~/.ssh/known_hosts"
  private_key_file = "~/.ssh/deploy_ed25519"
}

# The target behind the bastion is still verified end to end against its
# own pin; every form below is accepted as the tool printed it.
resource "fleet_executor" "db1" {
  name = "db1"
  host = "10.0.3.21"
  user = "deploy"
  # ssh-keyscan -t ed25519 -p 22 10.0.3.21 | ssh-keygen -lf -   (run from the bastion)
  host_key_fingerprint = "256 SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s 10.0.3.21 (ED25519)"
  proxy_jump           = "ops@bastion.example.org"
}

resource "fleet_executor" "db2" {
  name = "db2"
  host = "10.0.3.22"
  user = "deploy"
  # A line of ssh-keyscan output, or of a known_hosts file.
  host_key_fingerprint = "10.0.3.22 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
  proxy_jump           = "ops@bastion.example.org:2222"
}
