"""The API's start-up failures said in one plain sentence: no traceback, and uvicorn exits non-zero.

    lifespan: a setting, model path or store folder that cannot be used -> StartupFailure(sentence)
         -> PlainStartupFailure (ASGI middleware) sends that sentence as the "lifespan.startup.failed"
            message, which uvicorn prints instead of the traceback Starlette would send
         -> uvicorn: "ERROR:    <sentence>", "ERROR:    Application startup failed. Exiting.", exit 3
    port taken: uvicorn's own "[Errno 98] error while attempting to bind on address ..." (one line, after
            the models have loaded) -> plain_port_taken() rewrites it into a sentence (exit 3)

Only failures the library explains in words are turned into sentences; an unforeseen error keeps its traceback,
which is what a bug needs.
"""

from __future__ import annotations

import errno
import logging
import re
import sys

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class StartupFailure(Exception):
    """The API cannot start, for the reason its message says in a sentence."""


class PlainStartupFailure:
    """ASGI middleware: a StartupFailure raised by the lifespan is reported by its sentence alone."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def send_plainly(message: Message) -> None:
            # Starlette sends "startup.failed" from inside its except block, so the failure is the exception in hand
            failure = sys.exception()
            if message["type"] == "lifespan.startup.failed" and isinstance(failure, StartupFailure):
                message = {**message, "message": str(failure)}
            await send(message)

        await self.app(scope, receive, send_plainly)


def port_taken_sentence(error: OSError) -> str:
    """What to tell a person whose API cannot listen because the address is in use.

    port_taken_sentence(OSError(98, "error while attempting to bind on address ('127.0.0.1', 8765): address already in use"))
    -> "Port 8765 on 127.0.0.1 is already in use by another program: stop it, or start the API on another port (--port, or API_PORT for python api.py)."
    """
    address = re.search(r"\('([^']*)', (\d+)", str(error))
    where = f"Port {address[2]} on {address[1]}" if address else "The address the API was asked to listen on"
    return f"{where} is already in use by another program: stop it, or start the API on another port (--port, or API_PORT for python api.py)."


class _PortTakenInWords(logging.Filter):
    """Rewrites uvicorn's log record of a failed bind (it logs the OSError itself) into ``port_taken_sentence``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, OSError) and record.msg.errno == errno.EADDRINUSE:
            record.msg, record.args = port_taken_sentence(record.msg), ()
        return True


def plain_port_taken() -> None:
    """Say a port already taken in a sentence (uvicorn logs it on "uvicorn.error"); once per process."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _PortTakenInWords) for f in logger.filters):
        logger.addFilter(_PortTakenInWords())
