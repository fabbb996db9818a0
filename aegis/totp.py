"""``aegis totp init``: the owner's TOTP secret, for pairing accounts and (later) step-up."""

from __future__ import annotations

import io

import qrcode

from bot.chat.codes import new_secret, provisioning_uri
from bot.config.secrets import SecretFiles
from bot.config.settings import Settings


def init_totp(settings: Settings, *, rotate: bool, out) -> int:
    files = SecretFiles(settings.ensure_data_dir())
    if files.get("totp") is not None and not rotate:
        out.write(
            "A TOTP secret already exists. Use `aegis totp init --rotate` to replace it "
            "(codes from the old one stop working).\n"
        )
        return 1
    secret = files.put("totp", new_secret())
    uri = provisioning_uri(secret, "owner")
    out.write("Scan this with your authenticator app, or add the URI by hand:\n\n")
    out.write(qr_text(uri))
    out.write(f"\n{uri}\n\nThen send /pair CODE to the bot from the account to pair.\n")
    return 0


def qr_text(data: str) -> str:
    code = qrcode.QRCode(border=1)
    code.add_data(data)
    buffer = io.StringIO()
    code.print_ascii(out=buffer, invert=True)
    return buffer.getvalue()
