"""A tool call from decision to result: the call as a value, the one call path, grants, held
calls and the audit trail.
"""
