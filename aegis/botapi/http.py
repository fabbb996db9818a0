"""The HTTP client under PTB's Bot: aiohttp, which aegis already serves with, in place of httpx.

Every message aegis sends is one request, so the client's own cost is paid per message: httpx
spends about 0.9 ms of CPU on a small request to a local server, aiohttp about 0.3 ms. In
``aegis up`` the web, the worker and the clock share one interpreter, so every reply paid the
difference out of the same core.

It speaks to PTB as any ``BaseRequest`` does: a status and a body back, timeouts raised as
``TimedOut`` and transport failures as ``NetworkError``, whose message never carries the URL
(the URL holds the bot token). It honours ``HTTPS_PROXY``, ``HTTP_PROXY`` and ``NO_PROXY`` for
http:// proxies; a proxy of another kind is refused with a clear error, never bypassed.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass

import aiohttp
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData
from yarl import URL


class BotApiServerError(NetworkError):
    """Raised when the Bot API was reached and answered with a 5xx.

    PTB raises a plain ``NetworkError`` for a 5xx, the same as for a refused connection, and
    keeps no status: the delivery could not tell "Telegram is away" (wait, in order) from
    "Telegram fails on this one message" (set it aside after a few tries, issue 21). It stays a
    ``NetworkError``, so whatever treats one as "try again later" goes on doing so.

    It is PTB's error, not one of aegis's (those live in bot/errors.py): a ``BaseRequest`` must
    raise a ``TelegramError`` for PTB to pass it through unchanged, as this module's ``TimedOut``
    and ``NetworkError`` are, and the core, which never sees PTB, never sees this one either.
    """

    def __init__(self, status: int, description: str) -> None:
        super().__init__(f"{description} ({status})")
        self.status = status
        self.description = description


class AiohttpRequest(BaseRequest):
    """One aiohttp session, made on first use. A session belongs to the event loop it was made
    on: each loop builds its own Bot (``aegis.botapi.endpoint.make_bot``), so each has its own."""

    def __init__(
        self,
        *,
        connection_pool_size: int = 32,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
    ) -> None:
        self.pool_size = connection_pool_size
        self.timeouts = {
            "read": read_timeout,
            "write": write_timeout,
            "connect": connect_timeout,
            "pool": pool_timeout,
        }
        self.media_write_timeout = media_write_timeout
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[tuple[str, str], _Proxy | None] = {}

    @property
    def read_timeout(self) -> float | None:
        return self.timeouts["read"]

    async def initialize(self) -> None:
        """Nothing to do: the session opens with the first request (a Bot that never polls
        never opens its getUpdates client)."""

    async def shutdown(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout=BaseRequest.DEFAULT_NONE,
        write_timeout=BaseRequest.DEFAULT_NONE,
        connect_timeout=BaseRequest.DEFAULT_NONE,
        pool_timeout=BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        with_files = request_data is not None and request_data.contains_files
        files = request_data.multipart_data if with_files else None
        media_write = self.media_write_timeout if files else self.timeouts["write"]
        timeout = _timeout(
            read=self._given(read_timeout, self.timeouts["read"]),
            write=self._given(write_timeout, media_write),
            connect=self._given(connect_timeout, self.timeouts["connect"]),
            pool=self._given(pool_timeout, self.timeouts["pool"]),
        )
        body, headers = None, None
        if files:
            body = _form(request_data.json_parameters, files)
        elif request_data is not None:
            # One JSON document, which the Bot API takes for any call without a file.
            body, headers = request_data.json_payload, JSON_HEADERS
        session = self._open_session()
        proxy = self._proxy_for(url)
        routing = proxy.routing(url, headers) if proxy else {"headers": headers}
        try:
            request = session.request(
                method,
                url,
                data=body,
                timeout=timeout,
                allow_redirects=False,  # as httpx: a redirected POST would lose its body
                **routing,
            )
            async with request as response:
                body = await response.read()
        except TimeoutError as exc:  # aiohttp's own timeouts are TimeoutErrors too
            raise TimedOut(f"no answer from the Bot API in time ({type(exc).__name__})") from None
        except aiohttp.ClientError as exc:
            text = _without(url, proxy, exc)
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {text}") from None
        if response.status >= 500:
            raise BotApiServerError(response.status, _description(body))
        return response.status, body

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.pool_size, ttl_dns_cache=300)
            # Not trust_env: it reads ~/.netrc (whose "default" entry would send credentials
            # to the Bot API) and looks the proxy up again on a thread for every request.
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": self.USER_AGENT}
            )
        return self._session

    def _proxy_for(self, url: str) -> _Proxy | None:
        """The proxy the environment names for this URL's host, looked up once per host (a
        cache by URL would grow with every file downloaded)."""
        parts = urllib.parse.urlsplit(url)
        key = (parts.scheme, parts.hostname or "")
        if key not in self._proxies:
            self._proxies[key] = _environment_proxy(*key)
        return self._proxies[key]

    @staticmethod
    def _given(value, default: float | None) -> float | None:
        return default if isinstance(value, _UNSET) else value


def _timeout(*, read, write, connect, pool) -> aiohttp.ClientTimeout:
    """PTB's four timeouts in aiohttp's terms: waiting for a pooled connection counts against
    ``connect``, a silent server against ``sock_read``, and the whole exchange is bounded by
    their sum. aiohttp has no write timeout of its own and starts ``sock_read`` only once the
    body is sent, so the sum is what ends a stalled upload: with the worker's timeouts, 40 s,
    inside the delivery's 60 s lease, so no second delivery takes the row while it uploads."""
    parts = (read, write, connect, pool)
    total = None if any(part is None for part in parts) else sum(parts)
    waiting = None if connect is None or pool is None else connect + pool
    return aiohttp.ClientTimeout(total=total, connect=waiting, sock_connect=connect, sock_read=read)


@dataclass(frozen=True)
class _Proxy:
    url: URL  # without its user and password, which go as ``login``: never in an error's text
    login: dict[str, str] | None  # the Proxy-Authorization header

    def routing(self, target: str, headers: dict[str, str] | None) -> dict:
        """aiohttp's arguments for a request through this proxy. The login goes with the
        request itself to a plain http:// target, and with the CONNECT to an https:// one."""
        if self.login is None:
            return {"proxy": self.url, "headers": headers}
        if target.startswith("https://"):
            return {"proxy": self.url, "headers": headers, "proxy_headers": self.login}
        return {"proxy": self.url, "headers": {**(headers or {}), **self.login}}


def _environment_proxy(scheme: str, host: str) -> _Proxy | None:
    """HTTPS_PROXY (or HTTP_PROXY for http://) unless NO_PROXY covers the host. aiohttp goes
    through http:// proxies only; any other kind is refused in words rather than bypassed."""
    if urllib.request.proxy_bypass_environment(host):
        return None
    named = urllib.request.getproxies_environment().get(scheme)
    if not named:
        return None
    proxy = URL(named if "://" in named else f"http://{named}")
    if proxy.scheme != "http":
        raise NetworkError(
            f"the {scheme.upper()}_PROXY setting names a proxy aegis cannot use: "
            "only http:// proxies are supported"
        )
    login = None
    if proxy.user:
        pair = base64.b64encode(f"{proxy.user}:{proxy.password or ''}".encode()).decode()
        login = {"Proxy-Authorization": f"Basic {pair}"}
    return _Proxy(proxy.with_user(None), login)


def _description(body: bytes) -> str:
    """Telegram's description of a 5xx, or the status's own words when the body has none (a
    proxy's HTML page)."""
    try:
        description = json.loads(body.decode("utf-8", "replace")).get("description")
    except (ValueError, AttributeError, RecursionError):
        description = None
    return description if isinstance(description, str) and description else "Server Error"


def _form(fields: dict[str, str] | None, files: dict) -> aiohttp.FormData:
    # Field names and file names as they are: Telegram does not decode %-escapes in a name.
    form = aiohttp.FormData(quote_fields=False)
    for name, value in (fields or {}).items():
        form.add_field(name, value)
    for name, (filename, content, mimetype) in files.items():
        form.add_field(name, content, filename=_printable(filename), content_type=mimetype)
    return form


def _printable(filename: str) -> str:
    """A file name fit for a header: a control character (which aiohttp refuses, failing the
    send at every try) becomes "_"."""
    return "".join("_" if ord(c) < 32 or ord(c) == 127 else c for c in filename)


JSON_HEADERS = {"Content-Type": "application/json"}
_UNSET = type(BaseRequest.DEFAULT_NONE)  # PTB's "not given", which is a DefaultValue
# A bot token, "<bot id>:<secret>", as it appears in a URL, escaped or not.
_TOKEN = re.compile(r"\d+(?::|%3A)[A-Za-z0-9_-]{20,}", re.IGNORECASE)


def _without(url: str, proxy: _Proxy | None, exc: Exception) -> str:
    """The error's text with the request's URL, any token in it, and the proxy taken out."""
    text = str(exc).replace(url, "<Bot API URL>")
    if proxy is not None:
        text = text.replace(str(proxy.url), "<proxy>")
    return _TOKEN.sub("<token>", text)
