"""Every error aegis raises on purpose, under one root and a base per area. Edges turn them into
HTTP statuses or chat replies; a person reads the message, the log gets the traceback.

- ``ConfigError``: settings and ``aegis.yaml``
- ``ServiceError``: installing aegis as systemd units
- ``StoreError``, ``BrokerError``: the database and Redis
- ``ChatError``: talking with the owner (transport, pairing codes, the outbox)
- ``PolicyError``: the gate itself
- ``TaskError``, ``InteractionError``, ``ToolError``, ``AgentError``: the concepts of bot/
- ``MonitorError``, ``FederationError``: the areas still to come
- ``BackupError``: operations on a data dir (``aegis backup``)
"""


class AegisError(Exception):
    """Base class for every error raised by aegis."""


# -- configuration ---------------------------------------------------------------------------


class ConfigError(AegisError):
    """Raised when a setting is missing, malformed or contradicts another one."""


class AlreadyRunning(ConfigError):
    """Raised when another aegis process already serves this data dir in the same role."""


# -- operations ----------------------------------------------------------------------------


class ServiceError(AegisError):
    """Raised when the systemd units cannot be written or the commands that install them fail."""


# -- the store and the broker ------------------------------------------------------------------


class StoreError(AegisError):
    """Raised when the database cannot be reached or refuses a write."""


class BrokerError(AegisError):
    """Raised when the message broker (Redis) cannot be reached."""


# -- chat ----------------------------------------------------------------------------------


class ChatError(AegisError):
    """Raised when talking with the owner goes wrong: an update, a code, a delivery."""


class TransportError(ChatError):
    """Raised when an update cannot be accepted from Telegram (bad body, wrong secret)."""


class PairingError(ChatError):
    """Raised when a pairing or step-up code is refused.

    The message is safe to show to the person who sent the code: it never contains a secret.
    """


class PairingLocked(PairingError):
    """Raised when an account sent too many wrong codes and pairing is locked for a while."""


class LeaseLost(ChatError):
    """Raised when a delivery outlived its lease and another delivery owns the row now."""


# -- the gate ------------------------------------------------------------------------------


class PolicyError(AegisError):
    """Raised when the policy gate cannot be built or consulted."""


class PolicyConfigError(ConfigError, PolicyError):
    """Raised when a tool or agent declaration (built-in or in aegis.yaml) is invalid.

    The message names the declaration and what is wrong with it.
    """


class SchemaRefused(PolicyConfigError):
    """Raised when a tool's argument schema is not a usable JSON schema."""

    def __init__(self, tool: str, problem: str) -> None:
        super().__init__(f"tool {tool}: bad argument schema: {problem}")
        self.problem = problem


# -- tasks and interactions ----------------------------------------------------------------


class TaskError(AegisError):
    """Raised when a task cannot be captured or changed as asked."""


class TaskRefused(TaskError, ValueError):
    """Raised when a change is one the task cannot take; the message says why in one sentence."""


class TaskChanged(TaskRefused):
    """Raised when a change asked from a message finds the task no longer as that message
    showed it (moved or closed since): nothing is changed, the owner is asked again."""


class TranscriptionError(TaskError):
    """Raised when a voice note cannot be transcribed; the message says why in words the owner
    reads, and never holds the key."""


class TranscriptionRefused(TranscriptionError):
    """Raised when trying again cannot help: the key is refused or missing, the recording is
    too big, the server refuses the audio."""


class TranscriptionUnavailable(TranscriptionError):
    """Raised when the transcription server could not be asked or did not answer (a timeout,
    a 5xx, a refused connection): worth trying again later."""


class InteractionError(AegisError):
    """Raised when an interaction cannot be created or resolved as asked."""


class AlreadyAsked(InteractionError):
    """Raised when a task already has a card asking about it, inside the write that would make
    a second one, so the new card rolls back with the transaction."""


# -- tools ---------------------------------------------------------------------------------


class ToolError(AegisError):
    """Raised when one of the platform's tools cannot be offered or carried out."""


class ToolRefused(ToolError, ValueError):
    """Raised when a tool cannot carry out a call; the message says why, and nothing changed."""


class NameClash(ToolError, ValueError):
    """Raised when two granted tools would be offered under one name."""


# -- agents and their runs -----------------------------------------------------------------


class AgentError(AegisError):
    """Raised when an agent's run cannot start, go on or end as asked."""


class RunRefused(AgentError, ValueError):
    """Raised when a run cannot start (unknown agent, budget spent …); the message says why."""


class RunLost(AgentError):
    """Raised when the run was taken over by another holder (or ended) while this one worked."""


class Parked(AgentError):
    """Raised when the run waits for the owner on a card (by ``RunContext.call``)."""

    def __init__(self, interaction_id: int, reason: str) -> None:
        super().__init__(reason)
        self.interaction_id = interaction_id
        self.reason = reason


class HarnessFailed(AgentError):
    """Raised when the harness cannot go on (the CLI exited non-zero, every provider failed …);
    the message is shown to the owner, so it never holds a secret."""


class ProviderFailed(AgentError):
    """Raised when one provider did not answer a turn; the message is its status, in a few
    words."""


# -- the areas still to come ---------------------------------------------------------------


class MonitorError(AegisError):
    """Raised when a monitor cannot be declared, checked or alerted on as asked."""


class MonitorRefused(MonitorError, ValueError):
    """Raised when a monitor's declaration is refused; ``field`` names what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class ScheduleRefused(PolicyError, ValueError):
    """Raised when a schedule change is refused (what follows /every, or switching off a sweep
    that stays on); the message says why, or what to write."""


class ReminderError(AegisError):
    """Raised when a reminder cannot be made or kept as asked."""


class ReminderRefused(ReminderError, ValueError):
    """Raised when what follows /remind is refused; the message says what to write."""


class FederationError(AegisError):
    """Raised when a peer's request is refused or a request to a peer cannot be made."""


class PeerRefused(FederationError):
    """Raised when a request fails a check, a peer's here or ours there; ``status`` is the HTTP
    answer (4xx only), ``reason`` a short code counted per peer, and the message a sentence
    safe to send back: it never holds a secret, a signature or a header's value. ``signed``:
    the peer signed this refusal for our request (it had passed the peer's checks), so it is
    the peer's own word and not a stranger's on the way."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        peer: str | None = None,
        signed: bool = False,
    ):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.peer = peer
        self.signed = signed


class PeerLinkRefused(FederationError, ValueError):
    """Raised when a link cannot be made or changed as asked (an expired or reused invitation,
    an unknown peer, a bad name); nothing was changed and the message says why."""


class PeerUnreachable(FederationError):
    """Raised when a peer could not be asked or did not answer (refused connection, timeout,
    a 5xx), after the client's retries."""


# -- operations ------------------------------------------------------------------------------


class BackupError(AegisError):
    """Raised when a backup cannot be made, verified or restored; the message says why and what
    to do, in a sentence."""


class BackupDamaged(BackupError):
    """Raised when an archive does not match its manifest (a sum, a size, a missing member) or
    its database fails its integrity check; the message names the member."""
