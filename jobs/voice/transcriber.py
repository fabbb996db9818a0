"""An OpenAI-compatible transcription client: ``POST {url}/v1/audio/transcriptions``, a
multipart form with ``file`` and ``model``, answered with ``{"text": "..."}``. Hosted
providers and local whisper servers speak it alike.

What went wrong is told apart by whether trying again can help: a timeout, a 5xx, a 429 or a
refused connection is ``TranscriptionUnavailable``; a refused key (401/403), a missing key or
a request the server rejects is ``TranscriptionRefused``. The key is read from the environment
variable the settings name (as the agents' ``key_env``), sent only in the Authorization
header, and never put in an error, a log line or a message.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

from bot.config.settings import Settings
from bot.errors import TranscriptionRefused, TranscriptionUnavailable

logger = logging.getLogger(__name__)
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # a transcript of hours is well under this
KEY_SETTING = "AEGIS_TRANSCRIBE_KEY_ENV"


@dataclass(frozen=True)
class Transcriber:
    url: str  # the server's base URL, with or without /v1
    model: str
    key_env: str | None
    ceiling: float  # seconds; design rule 6: every external call has its own ceiling
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    @classmethod
    def of(cls, settings: Settings) -> Transcriber:
        return cls(
            settings.transcribe_url or "",
            settings.transcribe_model,
            settings.transcribe_key_env,
            settings.transcribe_timeout_seconds,
        )

    @property
    def endpoint(self) -> str:
        base = self.url.rstrip("/")
        return f"{base if base.endswith('/v1') else base + '/v1'}/audio/transcriptions"

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    async def transcribe(self, audio: bytes, filename: str, mime_type: str) -> str:
        """The recording's words; raises TranscriptionUnavailable or TranscriptionRefused."""
        form = aiohttp.FormData()
        form.add_field("file", audio, filename=filename, content_type=mime_type)
        form.add_field("model", self.model)
        form.add_field("response_format", "json")
        headers = self._headers()
        timeout = aiohttp.ClientTimeout(total=self.ceiling)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(self.endpoint, data=form, headers=headers) as response,
            ):
                status = response.status
                raw = await _read_capped(response)
        except TimeoutError:
            raise TranscriptionUnavailable(
                f"the transcription server at {self.host} did not answer within "
                f"{self.ceiling:g} second{'' if self.ceiling == 1 else 's'}"
            ) from None
        except aiohttp.ClientError as exc:
            raise TranscriptionUnavailable(
                f"the transcription server at {self.host} could not be reached "
                f"({type(exc).__name__})"
            ) from None
        logger.info("transcription at %s answered %s (%d bytes)", self.host, status, len(raw))
        self._check(status)
        return _text_of(raw, self.host)

    def _headers(self) -> dict[str, str]:
        if not self.key_env:
            return {}
        key = self.environ.get(self.key_env, "")
        if not key:  # no request goes out unauthenticated where a key was asked for
            raise TranscriptionRefused(
                f"{self.key_env}, the variable {KEY_SETTING} names, is not set"
            )
        return {"Authorization": f"Bearer {key}"}

    def _check(self, status: int) -> None:
        if status < 400:
            return
        if status in (401, 403):
            where = (
                f"the key in {self.key_env} (named by {KEY_SETTING})"
                if self.key_env
                else f"a request without a key: set {KEY_SETTING}"
            )
            raise TranscriptionRefused(
                f"the transcription server at {self.host} refused {where} (HTTP {status})"
            )
        if status in (408, 429) or status >= 500:
            raise TranscriptionUnavailable(
                f"the transcription server at {self.host} answered HTTP {status}"
            )
        raise TranscriptionRefused(
            f"the transcription server at {self.host} refused the recording (HTTP {status})"
        )


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    raw = bytearray()
    async for chunk in response.content.iter_chunked(65_536):
        raw += chunk
        if len(raw) > MAX_ANSWER_BYTES:
            raise TranscriptionRefused("the transcription server's answer is too large")
    return bytes(raw)


def _text_of(raw: bytes, host: str) -> str:
    """The ``text`` of the answer. Anything else (a proxy's error page, say) is taken as the
    server not being itself yet, and tried again."""
    try:
        text = json.loads(raw)["text"]
    except (ValueError, KeyError, TypeError):
        text = None
    if not isinstance(text, str):
        raise TranscriptionUnavailable(
            f"the transcription server at {host} answered something that is not a transcript"
        )
    return text
