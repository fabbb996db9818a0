"""Reminders: one-shot, made from the chat (``/remind 20m call the bank``), fired by the clock as
a card with Done, Snooze 1h and Tomorrow. ``when.py`` reads the time as people write it, in the
owner's zone; ``reminders.py`` owns the table."""
