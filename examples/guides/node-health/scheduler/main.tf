# A stand-in for a scheduler module: one placement slot per node that passes
# its checks now, accepting work unless the node is held in error.
variable "nodes" {
  description = "Nodes that pass their checks now; known at plan, so they key for_each."
  type        = list(string)
}

variable "held" {
  description = "Nodes held in error until an operator clears them. May be known only after apply: it is read in attributes, never in for_each."
  type        = list(string)
  default     = []
}

resource "terraform_data" "slot" {
  for_each = toset(var.nodes)
  input = {
    node      = each.key
    accepting = !contains(var.held, each.key)
  }
}

output "slots" {
  value = sort(keys(terraform_data.slot))
}

output "accepting" {
  value = sort([for name, slot in terraform_data.slot : name if slot.output.accepting])
}
