"""Who may ask, and how much: two ASGI middlewares wrapped around every request.

    request -> AccessCheck (token or local Host; no change from another site's page: 401/403)
            -> BodyLimit (the body counted as it arrives: 413 past API_MAX_REQUEST_MB / API_MAX_JSON_MB)
            -> the app
"""

from __future__ import annotations

import hmac
import logging
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers

import config

from server.errors import ApiError, error_response

log = logging.getLogger(__name__)

# -----------------------------------------------------------------------------
# Access: a bearer token when API_TOKEN is set, else local Host headers only

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "[::1]"}


def host_is_local(host: str) -> bool:
    """host_is_local("localhost:8765") -> True; host_is_local("evil.example:8765") -> False"""
    host = host.strip().lower()
    name = host[: host.find("]") + 1] if host.startswith("[") else host.rsplit(":", 1)[0]
    return name in _LOCAL_HOSTS


def access_refused(headers: Headers) -> JSONResponse | None:
    """The 401/403 reply for a request this server must not serve, or None to serve it."""
    if config.API_TOKEN:
        given = headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, f"Bearer {config.API_TOKEN}".encode()):
            message = "This server needs its token: send the header 'Authorization: Bearer <API_TOKEN>'."
            return error_response(401, message, {"WWW-Authenticate": "Bearer"})
    elif not host_is_local(headers.get("host", "")):
        message = "Without API_TOKEN this server only answers requests addressed to localhost; set API_TOKEN to serve others."
        return error_response(403, message)
    return None


# A page on any site can make the browser POST here without asking first (a plain HTML form, or
# fetch with mode "no-cors"): the Host check passes, since the request really goes to 127.0.0.1,
# and a token does not help a browser that holds none. But browsers say who asks: Origin on every
# POST, PUT, PATCH and DELETE, and Sec-Fetch-Site. Programs (curl, scripts, the OpenAI client) send neither.
_SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
_OWN_SITE = {"same-origin", "none"}  # Sec-Fetch-Site of this server's own pages (/docs) and of a typed address
CROSS_SITE_MESSAGE = (
    "Refused: a web page of another site sent this request through a browser. This server takes changes "
    "(uploads, deletions, questions, searches) only from programs such as curl or the OpenAI client, "
    "and from its own pages (/docs)."
)


def origin_of(scheme: str, host: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) as a browser compares origins; None when it is no origin.

    origin_of("http", "localhost:8765") -> ("http", "localhost", 8765); origin_of("https", "[::1]") -> ("https", "::1", 443)
    """
    try:
        url = urlsplit(f"{scheme.strip().lower()}://{host.strip()}")
        return url.scheme, url.hostname or "", url.port or {"http": 80, "https": 443}.get(url.scheme, 0)
    except ValueError:  # a port that is not a number
        return None


def referer_origin(referer: str | None) -> str | None:
    """The origin a Referer names, for a browser that sent no Origin (older ones, on some requests):
    referer_origin("http://evil.example/page?q=1") -> "http://evil.example"; one that is no URL -> "null" (foreign)."""
    if referer is None:
        return None
    try:
        url = urlsplit(referer.strip())
    except ValueError:
        return "null"
    return f"{url.scheme}://{url.netloc.rpartition('@')[2]}" if url.scheme and url.netloc else "null"


def from_another_site(scope, headers: Headers) -> bool:
    """Whether a browser sent this request for a page that is not this server's own: its
    Sec-Fetch-Site is present and not same-origin/none (another port of localhost is "same-site",
    and foreign too), or its Origin (else its Referer's) is present and not the scheme://host:port it was sent to."""
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in _OWN_SITE:
        return True
    origin = headers.get("origin") or referer_origin(headers.get("referer"))
    if origin is None:
        return False
    scheme, _, host = origin.partition("://")
    own = origin_of(scope.get("scheme", "http"), headers.get("host", ""))
    return own is None or not host or origin_of(scheme, host) != own  # Origin "null" (a sandboxed page) too


def cross_site_refused(scope, headers: Headers) -> JSONResponse | None:
    """The 403 for a request that would change something (any method but GET, HEAD, OPTIONS: uploads,
    deletions, questions, searches) sent by a page of another site; None to serve it. Token or not."""
    if scope["method"] in _SAFE_METHODS or not from_another_site(scope, headers):
        return None
    log.warning(
        "Refused %s %s from another site (Origin %r, Sec-Fetch-Site %r)",
        scope["method"], scope["path"], headers.get("origin"), headers.get("sec-fetch-site"),
    )
    return error_response(403, CROSS_SITE_MESSAGE)


class AccessCheck:
    """ASGI middleware applying ``access_refused``, then ``cross_site_refused``, to every HTTP request
    (streams pass through untouched). A refused request's body is never read."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            refusal = access_refused(headers) or cross_site_refused(scope, headers)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


# -----------------------------------------------------------------------------
# Bounded input: a body is counted as it arrives, and refused (413) once over its limit


class BodyTooLarge(ApiError):
    def __init__(self, message: str):
        super().__init__(413, message)


def body_limit(headers: Headers) -> tuple[int, str]:
    """The most bytes this request's body may hold, and the sentence for one that holds more:
    API_MAX_REQUEST_MB for an upload (multipart/form-data), API_MAX_JSON_MB for any other body."""
    if headers.get("content-type", "").strip().lower().startswith("multipart/form-data"):
        mb = config.API_MAX_REQUEST_MB
        return mb * 2**20, (
            f"This upload is over {mb} MB, the limit for one request with all its files (setting API_MAX_REQUEST_MB); "
            "nothing was added. Send the files in several requests."
        )
    mb = config.API_MAX_JSON_MB
    return mb * 2**20, f"This request's body is over {mb} MB, the limit (setting API_MAX_JSON_MB)."


class BodyLimit:
    """ASGI middleware: a body over ``body_limit`` ends in 413 as soon as that is known: at once when
    Content-Length says so (the body is never read), else when the bytes received so far pass the limit
    (a chunked body): the app's read then fails, and whatever it would reply is replaced by the 413.
    The server reads past the rest of such a body without keeping it, so the client gets the reply."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        limit, message = body_limit(headers)
        declared = headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > limit:
            log.warning("Refused %s %s: Content-Length %s is over the limit of %d bytes", scope["method"], scope["path"], declared, limit)
            await error_response(413, message)(scope, receive, send)
            return
        received, over, started = 0, False, False

        async def counted_receive():
            nonlocal received, over
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > limit:
                    if not over:
                        log.warning("Refused %s %s: its body passed the limit of %d bytes", scope["method"], scope["path"], limit)
                    over = True
                    raise BodyTooLarge(message)
            return event

        async def guarded_send(event):
            nonlocal started
            if over:  # the app's reply to a read that failed: the 413 below replaces it
                return
            started = started or event["type"] == "http.response.start"
            await send(event)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            if not over:
                raise
        if over and not started:
            await error_response(413, message)(scope, receive, send)
