"""Tasks, the GTD spine: a task as data, capture, triage of the inbox, and the notes filed as
``@reference``.
"""
