"""What keeps the platform going: job runs, heartbeats, schedules, the leases (one clock at a
time), the clock's turn over what may be due (due.py), retention (old history pruned), and the
gauges /metrics reads."""
