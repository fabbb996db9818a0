"""The MCP adapter: the port held from the start, and the server that offers the platform's tools
to coding agents, gated here, on the server.
"""
