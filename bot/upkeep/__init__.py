"""What keeps the platform going: job runs, heartbeats, schedules, the leases (one clock at a
time), retention (old history pruned), and the gauges /metrics reads."""
