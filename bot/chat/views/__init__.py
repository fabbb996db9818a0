"""How every concept reads in chat: cards, task lists, runs, schedules, /status, and the one
command table.
"""
