"""What aegis watches: monitors (http, tcp, cert, cmd), the verdict of their checks, and the
incidents they open, remind about and close.
"""
