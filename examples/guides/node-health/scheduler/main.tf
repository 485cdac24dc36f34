# A stand-in for a scheduler module: one placement slot per node that may
# take work.
variable "nodes" {
  description = "Names of the nodes that may take work."
  type        = list(string)
}

resource "terraform_data" "slot" {
  for_each = toset(var.nodes)
  input    = each.key
}

output "slots" {
  value = sort(keys(terraform_data.slot))
}
