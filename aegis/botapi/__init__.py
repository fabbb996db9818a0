"""The Bot API as both adapters reach it (the handlers in the web process, the jobs in a worker):
which endpoint (Telegram's, one at AEGIS_TELEGRAM_API_URL, or the built-in emulator), the Bot
that talks to it over aiohttp, and the chats scheduled work reports to.
"""
