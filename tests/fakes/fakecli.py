"""What the fake coding CLIs (tests/fakes/claude, codex, opencode) share.

Each fake reads its request from stdin, as aegis gives it, checks that it was started the way
its vendor's CLI must be (the flags that make it headless and print JSON), records what it was
given into ``fake-<cli>.jsonl`` in its working directory (argv, cwd, request, instructions,
model, the MCP configuration and the bearer token it would send, its own pid and any child's),
and then behaves as the request says:

- ``exit 3``: prints one event, complains on stderr, exits with status 3;
- ``garbage``: prints lines that are not JSON, exits 0;
- ``silent``: prints nothing, exits 0;
- ``report failure``: the CLI's own failure event in its stream, exits 0;
- ``every call refused``: one tool call that ends refused, then a success saying so, exits 0
  (the completed no-op: what Codex printed when its approval policy refused aegis's tool);
  ``read then a refused change``: a read that works first, then the same;
- ``hang``: prints its first event and sleeps; ``stubborn`` also ignores SIGTERM;
  ``spawn a child`` first starts a child process (same process group) that sleeps too;
- ``wait for go``: waits (at most a minute) for a file named ``go`` in its working directory,
  then succeeds, so a test can look at the run while it is under way;
- ``call aegis <tool> <json>``: calls that tool of aegis's MCP server (the URL and token it was
  given) over HTTP, retrying the identical call while the server says to, and answers with
  the tool's text: what a real CLI does with a tool call, without the model;
- anything else: uses two tools, writes some text, and answers ``Done: <request>``.
"""

from __future__ import annotations

import abc
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REFUSED = "MCP tool call requires approval, but approval policy is never"


class Fake(abc.ABC):
    """One vendor's CLI: how it is started, and the events it prints."""

    name = ""

    @abc.abstractmethod
    def check_args(self, argv: list[str]) -> str | None:
        """Why these arguments would not start the real CLI headless, or None."""

    @abc.abstractmethod
    def given(self, argv: list[str]) -> dict:
        """Instructions, model, MCP config and token, as this CLI would find them."""

    @abc.abstractmethod
    def started(self) -> list[dict]: ...

    @abc.abstractmethod
    def tool_use(self, name: str, arguments: dict, refused: str | None = None) -> list[dict]:
        """A tool's use and its end: done, or ``refused`` with that message."""

    @abc.abstractmethod
    def text(self, text: str) -> list[dict]: ...

    @abc.abstractmethod
    def finished(self, answer: str) -> list[dict]: ...

    @abc.abstractmethod
    def failed(self, message: str) -> list[dict]: ...


def value_after(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else None


def overrides(argv: list[str]) -> dict[str, str]:
    """Codex's ``-c key=value`` overrides; values are TOML (JSON strings are TOML strings)."""
    found = {}
    for index, arg in enumerate(argv[:-1]):
        if arg in ("-c", "--config"):
            key, _, value = argv[index + 1].partition("=")
            try:
                found[key] = json.loads(value)
            except ValueError:
                found[key] = value
    return found


def read_config(path: str | None) -> tuple[dict | None, str | None]:
    if path is None:
        return None, None
    mode = oct(os.stat(path).st_mode & 0o777)
    return json.loads(Path(path).read_text(encoding="utf-8")), mode


def emit(events: list[dict]) -> None:
    for event in events:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def record(fake: Fake, argv: list[str], request: str, **more) -> None:
    entry = {
        "cli": fake.name,
        "argv": argv,
        "cwd": os.getcwd(),
        "request": request,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "env_pwd": os.environ.get("PWD"),
        "aegis_env": sorted(k for k in os.environ if k.startswith("AEGIS_")),
        **fake.given(argv),
        **more,
    }
    with open(f"fake-{fake.name}.jsonl", "a", encoding="utf-8") as file:
        file.write(json.dumps(entry) + "\n")


def main(fake: Fake) -> None:
    argv = sys.argv[1:]
    problem = fake.check_args(argv)
    if problem:
        sys.stderr.write(f"error: {problem}\n")
        sys.exit(2)
    request = sys.stdin.read()
    child = None
    if "spawn a child" in request:  # its first event says when the child is being started
        emit(fake.started())
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    record(fake, argv, request, child_pid=child.pid if child else None)
    call = re.search(r"call aegis (\S+) (\{.*\})", request)
    if call:
        emit(fake.started())
        emit(fake.tool_use(f"aegis.{call.group(1)}", json.loads(call.group(2))))
        given = fake.given(argv)
        text = call_aegis(given["mcp_url"], given["token"], call.group(1), call.group(2))
        emit(fake.finished(f"Done: {text}"))
        return
    behave(fake, request, started=child is not None)


def call_aegis(url: str, token: str, tool: str, arguments: str, budget: int = 60) -> str:
    """One MCP tools/call over streamable HTTP (aegis's server is stateless, so no session is
    needed), repeated while the server says to retry; the text of its last answer."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    body["params"] = {"name": tool, "arguments": json.loads(arguments)}
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    text = ""
    for _ in range(budget):
        request = urllib.request.Request(url, json.dumps(body).encode(), headers)
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (loopback)
            raw = response.read().decode()
        data = [line[5:].strip() for line in raw.splitlines() if line.startswith("data:")]
        result = json.loads(data[-1] if data else raw)["result"]
        text = "".join(part.get("text", "") for part in result["content"])
        if not result.get("isError") or "Retry this identical call now" not in text:
            return text
    return f"nothing was executed: no approval came ({text})"


def behave(fake: Fake, request: str, *, started: bool) -> None:
    if "silent" in request:
        return
    if "garbage" in request:
        sys.stdout.write('this is not JSON\n{"half": \n[1, 2, 3]\n')
        return
    if not started:
        emit(fake.started())
    if "exit 3" in request:
        sys.stderr.write("warming up\nfatal: the model refused the key\n")
        sys.exit(3)
    if "report failure" in request:
        emit(fake.failed("the model is overloaded"))
        return
    if "read then a refused change" in request:
        emit(fake.tool_use("Read", {"file_path": "README.md"}))
        emit(fake.tool_use("aegis.demo_write_file", {"path": "x"}, refused=REFUSED))
        emit(fake.finished("I read it, and could not write."))
        return
    if "every call refused" in request:
        emit(fake.tool_use("aegis.demo_write_file", {"path": "x"}, refused=REFUSED))
        emit(fake.finished("I could not write the file."))
        return
    if "hang" in request:
        if "stubborn" in request:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)
        return
    if "wait for go" in request:
        deadline = time.monotonic() + 60
        while not Path("go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    emit(fake.tool_use("Read", {"file_path": "README.md"}))
    emit(fake.tool_use("aegis.demo_read_clock", {}))
    emit(fake.text("Looking into it."))
    emit(fake.finished(f"Done: {request.strip()}"))
