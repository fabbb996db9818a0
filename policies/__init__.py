"""The policy gate: ``decide(agent, tool, args) -> Allow | Gate | Deny`` (see design.md).

Nothing is built here yet; the interactions and approvals issue fills it in.
"""
