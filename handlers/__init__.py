"""The Telegram adapter: the PTB Application, the gate, thin handlers and update intake."""
