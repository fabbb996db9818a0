"""Settings: declared once, typed, read from the environment (and ``.env``) once, then passed in.

The names are fixed by the design (``AEGIS_*``). Nothing else in aegis reads ``os.environ``.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from pathlib import Path
from typing import Annotated
from zoneinfo import ZoneInfo

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.errors import ConfigError, PolicyConfigError
from bot.upkeep.timing import at_cron, zone_of

LOOPBACK_HOSTS = {"localhost"}


class Settings(BaseSettings):
    """Everything aegis can be told through ``AEGIS_*`` variables."""

    model_config = SettingsConfigDict(
        env_prefix="AEGIS_", env_file=".env", extra="ignore", validate_default=True
    )

    data_dir: Path = Field(
        Path(".aegis"), description="SQLite file, embedded Redis socket, secrets, logs."
    )
    database_url: str | None = Field(
        None, description="Any SQLAlchemy async URL; default: SQLite in the data dir."
    )
    redis_url: str | None = Field(
        None, description="Broker and short-lived state; default: an embedded Redis."
    )
    telegram_token: SecretStr | None = Field(
        None, description="The bot token from BotFather; default: the local emulator."
    )
    telegram_api_url: str | None = Field(
        None, description="Bot API base URL, token appended (PTB's base_url)."
    )
    owner_ids: Annotated[frozenset[int], NoDecode] = Field(
        frozenset(), description="Telegram user ids allowed to use the bot, comma-separated."
    )
    owner_chat_id: int | None = Field(
        None,
        lt=0,
        description="A supergroup with topics (its id, -100…) where each agent gets a topic of "
        "its own; /here sent in the group does the same. Unset: everything in the private chat.",
    )
    public_url: str | None = Field(
        None, description="Set it and the bot registers a webhook instead of long polling."
    )
    host: str = Field("127.0.0.1", description="Web server address.")
    port: int = Field(8742, ge=1, le=65535, description="Web server port.")
    mcp_port: int = Field(8743, ge=1, le=65535, description="MCP server port, loopback only.")
    mcp_hold_seconds: float = Field(
        25.0,
        gt=0,
        le=55,
        description="How long the MCP server holds a call waiting for its approval.",
    )
    allow_public_bind: bool = Field(
        False, description="Must be true to bind AEGIS_HOST to anything but loopback."
    )
    webhook_max_bytes: int = Field(1_048_576, description="Largest webhook body accepted.")
    outbox_per_chat_per_second: int = Field(
        1, description="Messages per second to one chat (Telegram asks for about 1)."
    )
    outbox_global_per_second: int = Field(
        30, description="Messages per second across all chats (Telegram allows about 30)."
    )
    outbox_retry_seconds: float = Field(
        1.0,
        gt=0,
        le=60,
        description="The first wait before a message Telegram answered with a server error is "
        "tried again; each next wait doubles, and after 5 tries in a row it is set aside.",
    )
    outbox_file_over_chars: int = Field(
        12_000, description="Texts longer than this are sent as a file instead of split."
    )
    update_retry_seconds: float = Field(
        10.0, description="An update interrupted by an outage is handled again after this."
    )
    worker_threads: int = Field(4, description="Threads in each worker process.")
    run_heartbeat_timeout: float = Field(
        30.0,
        description="A running agent whose worker stopped beating this long is taken over.",
    )
    token_budget_per_day: int | None = Field(
        None,
        gt=0,
        description="Tokens all agents together may spend in a rolling 24 hours; once spent, "
        "new runs are refused with a card. Default: no overall budget.",
    )
    delegation_per_tick: int = Field(
        5, ge=0, description="Assigned tasks the sweep hands to their agents per tick."
    )
    delegation_cooldown_seconds: int = Field(
        3600, ge=0, description="A task whose run started this recently is not started again."
    )
    delegation_expensive_cap: int = Field(
        2, ge=0, description="Expensive agents' runs under way at once, across the fleet."
    )
    metrics_token: SecretStr | None = Field(
        None,
        description="The bearer token /metrics asks for; unset: the data dir's "
        "secrets/metrics-token, made at the first start.",
    )
    keep_days: int = Field(
        30,
        ge=2,  # an update can come again for a day (Telegram keeps one 24 h): never forget sooner
        le=36500,
        description="Days to keep delivered messages, handled updates and job runs; older ones "
        "are pruned every hour.",
    )
    keep_audit_days: int = Field(
        365,
        ge=2,
        le=36500,
        description="Days to keep the audit (who approved what, and every refusal).",
    )
    timezone: str = Field(
        "UTC",
        description="The owner's time zone, an IANA name (Europe/Berlin): schedules at a time "
        "of day and reminders are in it, and the chat shows every time in it.",
    )
    briefing_at: str = Field("08:00", description="When the daily briefing comes (HH:MM).")
    weekly_review_at: str = Field(
        "fri 17:00", description="When the weekly review comes: a day and a time."
    )
    transcribe_url: str | None = Field(
        None,
        description="An OpenAI-compatible transcription server (a hosted provider or a local "
        "whisper server): voice notes are posted to <url>/v1/audio/transcriptions and captured "
        "as their words. Unset: voice notes are captured as recordings, untranscribed.",
    )
    transcribe_model: str = Field(
        "whisper-1", min_length=1, description="The model the transcription server is asked for."
    )
    transcribe_key_env: str | None = Field(
        None,
        description="The name of the environment variable that holds the transcription "
        "server's API key (never the key itself); unset: no key is sent.",
    )
    transcribe_max_bytes: int = Field(
        20 * 1024 * 1024,
        gt=0,
        description="Larger recordings are kept untranscribed (the Bot API downloads at most "
        "20 MB).",
    )
    transcribe_timeout_seconds: float = Field(
        120.0, gt=0, le=600, description="The ceiling of one transcription request."
    )
    transcribe_tries: int = Field(
        5,
        ge=1,
        le=10,
        description="Tries of a transcription that times out or finds the server down, before "
        "the note is kept untranscribed and the owner told.",
    )
    transcribe_retry_seconds: float = Field(
        5.0, gt=0, le=600, description="The wait before a transcription's second try; doubles."
    )
    config_file: Path = Field(
        Path("aegis.yaml"),
        description="Behaviour as data: your tools and agents. A missing file is fine.",
    )
    peer_name: str = Field(
        default_factory=lambda: _host_name(),
        pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
        description="This aegis's name in its links with other instances (federation); "
        "default: this machine's host name, lowercased.",
    )
    peer_url: str | None = Field(
        None,
        description="The address other aegis instances reach this one at, as invitations "
        "name it; default: AEGIS_PUBLIC_URL, else the web server's own address.",
    )
    log_level: str = Field("INFO", description="Python logging level.")
    unit_dir: Path = Field(
        Path("/etc/systemd/system"),
        description="Where `aegis service install` writes the systemd units and `aegis doctor` "
        "looks for them.",
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zone_of(value)
        except PolicyConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("briefing_at", "weekly_review_at")
    @classmethod
    def _time_of_day(cls, value: str, info) -> str:
        try:
            at_cron(info.field_name, value)
        except PolicyConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @property
    def zone(self) -> ZoneInfo:
        return zone_of(self.timezone)

    @field_validator("log_level")
    @classmethod
    def _known_log_level(cls, value: str) -> str:
        if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return value.upper()

    @field_validator("transcribe_url", "peer_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL, e.g. https://api.openai.com")
        return value.strip().rstrip("/")

    @field_validator("owner_ids", mode="before")
    @classmethod
    def _parse_owner_ids(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        try:
            return frozenset(int(part) for part in value.replace(" ", "").split(",") if part)
        except ValueError:
            raise ValueError("must be Telegram user ids separated by commas") from None

    @property
    def uses_emulator(self) -> bool:
        return self.telegram_token is None

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "aegis.sqlite3"

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.sqlite_path.resolve()}"

    @property
    def web_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def peer_address(self) -> str:
        """Where peers reach this aegis: the root of its web server."""
        return (self.peer_url or self.public_url or self.web_url).rstrip("/")

    def check_bind(self) -> None:
        """Refuse to listen beyond loopback unless the operator asked for it explicitly."""
        if is_loopback(self.host) or self.allow_public_bind:
            return
        raise ConfigError(
            f"AEGIS_HOST={self.host} is not a loopback address; set AEGIS_ALLOW_PUBLIC_BIND=true "
            "to serve the webhook and console beyond this machine."
        )

    @property
    def private_paths(self) -> tuple[Path, ...]:
        """What holds aegis's secrets, resolved: the data dir, and the .env file these settings
        are read from (in the working directory), where there is one. No agent reads there."""
        env_file = Path(".env").resolve()
        return (self.data_dir.resolve(), *((env_file,) if env_file.is_file() else ()))

    def ensure_data_dir(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self.data_dir


def _host_name() -> str:
    """The host name as a peer name: lowercase, anything else than letters and digits a '-'."""
    name = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().split(".")[0].lower()).strip("-")
    return name[:63] or "aegis"


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_settings(**overrides: object) -> Settings:
    """Read the environment once; a bad value becomes a ConfigError naming the variable."""
    try:
        return Settings(**overrides)
    except ValueError as exc:
        raise ConfigError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if errors is None:
        return str(exc)
    lines = []
    for error in errors():
        name = "AEGIS_" + "_".join(str(part) for part in error["loc"]).upper()
        lines.append(f"{name}: {error['msg']}")
    return "; ".join(lines)
