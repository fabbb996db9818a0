"""Federation between aegis instances over signed requests (see design.md, Wire formats).

Nothing is built here yet.
"""
