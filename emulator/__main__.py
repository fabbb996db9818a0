"""Run the emulator on its own: ``python -m emulator --port 8742``.

Handy for trying the chat page or pointing an external bot at it; aegis itself
mounts the app inside its own server instead.
"""

from __future__ import annotations

import argparse
import secrets

from aiohttp import web

from emulator import EmulatorState, create_emulator_app


def main() -> None:
    parser = argparse.ArgumentParser(description="Local Telegram Bot API emulator")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8742)
    parser.add_argument("--token", default=None, help="bot token (random when omitted)")
    parser.add_argument("--key", default=None, help="control key (random when omitted)")
    args = parser.parse_args()
    key = args.key or secrets.token_urlsafe(16)
    # The token is what a bot authenticates with: a fresh one each run, never a known default.
    args.token = args.token or f"{secrets.randbelow(9 * 10**9) + 10**9}:{secrets.token_urlsafe(26)}"
    app = create_emulator_app(EmulatorState(), token=args.token, control_key=key)
    base = f"http://{args.host}:{args.port}"
    print(f"Bot API base URL: {base}/bot   (token {args.token})")
    print(f"Chat page:        {base}/chat?key={key}")
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
