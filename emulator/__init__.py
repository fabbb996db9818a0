"""Built-in Telegram Bot API emulator: lets aegis run, and be tested, without a bot token.

The real python-telegram-bot talks HTTP to it exactly as to api.telegram.org, a local
chat page lets a person play the user, and tests drive the user side through
:class:`emulator.client.EmulatorClient`.
"""

from emulator.app import create_emulator_app
from emulator.state import DEFAULT_USER, EmulatorState

__all__ = ["DEFAULT_USER", "EmulatorState", "create_emulator_app"]
