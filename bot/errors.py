"""Every error aegis raises on purpose. Edges turn them into HTTP statuses or chat replies."""


class AegisError(Exception):
    """Base class for every error raised by aegis."""


class ConfigError(AegisError):
    """Raised when a setting is missing, malformed or contradicts another one."""


class StoreError(AegisError):
    """Raised when the database cannot be reached or refuses a write."""


class BrokerError(AegisError):
    """Raised when the message broker (Redis) cannot be reached."""


class PairingError(AegisError):
    """Raised when a pairing or step-up code is refused.

    The message is safe to show to the person who sent the code: it never contains a secret.
    """


class PairingLocked(PairingError):
    """Raised when an account sent too many wrong codes and pairing is locked for a while."""


class TransportError(AegisError):
    """Raised when an update cannot be accepted from Telegram (bad body, wrong secret)."""


class PolicyError(AegisError):
    """Raised when the policy gate cannot be built or consulted."""


class PolicyConfigError(ConfigError, PolicyError):
    """Raised when a tool or agent declaration (built-in or in aegis.yaml) is invalid.

    The message names the declaration and what is wrong with it.
    """


class InteractionError(AegisError):
    """Raised when an interaction cannot be created or resolved as asked."""


class ToolRefused(AegisError, ValueError):
    """A tool call the tool cannot carry out; the message says why, and nothing was changed."""
