"""A tool call from decision to result: the one call path, grants, held calls and the audit trail.
"""
