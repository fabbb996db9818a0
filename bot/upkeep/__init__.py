"""What keeps the platform going: job runs, heartbeats and schedules."""
