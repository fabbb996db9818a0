"""Talking with the owner, with no Telegram in it: the update log, the outbox, signed callback
data, who the owners are, their one-time codes, and the daily briefing.
"""
