"""Interactions: every human handoff as one row, how an answer settles it, and its continuation."""
