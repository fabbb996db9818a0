"""Agents: their profiles, their runs and how runs end, the model-call ledger, MCP tokens,
delegation of assigned tasks, and the built-in demo agent.
"""
