"""Federation between aegis instances over signed requests (see design.md, Wire formats).

- ``signing.py``: the canonical string, direction keys and the four headers (pure)
- ``headers.py``: those headers parsed strictly (pure)
- ``checks.py``: a peer's request checked in the design's order (pure, the nonce store aside)
- ``invitations.py``: the one-time invitation, and the link's secret its claim makes (pure)
- ``links.py``: peer links as rows, their secrets as 0600 files
- ``nonces.py``: the nonces in Redis; ``refusals.py``: refusals audited, rate-limited
- ``server.py``: the route the web process serves; ``client.py``: asking a peer
- ``requests.py``: what one side asks the other to do, as rows at both ends under one id
- ``acting.py``: a peer's request run under this aegis's gate until it ends

Built so far: links, the signed request, the claim of an invitation, ``status``, and deploys
asked from chat (handlers/peers.py, jobs/peer_requests.py). Runs and messages across peers are
not built yet.
"""
