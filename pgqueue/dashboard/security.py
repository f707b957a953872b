"""Who may use the dashboard and which requests it trusts.

* Authentication (when a token or basic-auth users are configured) guards every page and
  asset but the login form: ``Authorization: Bearer TOKEN``, HTTP basic, or the session
  cookie the login form sets (an HMAC of the token under a per-process key, never the
  token itself).
* CSRF: every POST must carry the value of the ``pgqueue_csrf`` cookie (SameSite=Strict,
  HttpOnly) in its form (``csrf``) or in an ``X-CSRF-Token`` header, and a foreign
  ``Origin`` is refused. Pages render the value into their forms and into htmx's headers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection, Request

from .config import DashboardConfig

__all__ = ["CSRF_COOKIE", "SESSION_COOKIE", "Guard"]

CSRF_COOKIE = "pgqueue_csrf"
SESSION_COOKIE = "pgqueue_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


class Guard:
    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self._key = secrets.token_bytes(32)

    # -- authentication -------------------------------------------------------------------

    def session_value(self) -> str:
        if self.config.token is None:
            raise RuntimeError("no token is configured: there is no token session")
        return hmac.new(self._key, self.config.token.encode(), hashlib.sha256).hexdigest()

    def token_matches(self, candidate: str) -> bool:
        token = self.config.token
        return token is not None and hmac.compare_digest(candidate.encode(), token.encode())

    def user(self, conn: HTTPConnection) -> str | None:
        """The authenticated user ("token" for the token), or None."""
        header = conn.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and self.token_matches(value.strip()):
            return "token"
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            name, _, password = decoded.partition(":")
            expected = self.config.basic_auth.get(name)
            if expected is not None and hmac.compare_digest(password.encode(), expected.encode()):
                return name
            return None
        cookie = conn.cookies.get(SESSION_COOKIE)
        if cookie and self.config.token is not None and hmac.compare_digest(cookie, self.session_value()):
            return "token"
        return None

    def actor(self, request: Request) -> str:
        """Who did it, for the action log: the user and the client's address."""
        user = self.user(request) if self.config.auth_required else None
        client = request.client.host if request.client else "?"
        return f"{user or 'anonymous'}@{client}"

    # -- messages after an action ------------------------------------------------------------

    def sign(self, message: str) -> str:
        """A tag for a message carried in a redirect's URL, so that nobody can craft a link
        that makes the dashboard say something it did not."""
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()[:32]

    def signed(self, message: str, tag: str) -> bool:
        return hmac.compare_digest(self.sign(message), tag)

    # -- CSRF -----------------------------------------------------------------------------

    @staticmethod
    def csrf_token(request: Request) -> tuple[str, bool]:
        """The request's CSRF value and whether it is new (then set the cookie)."""
        existing = request.cookies.get(CSRF_COOKIE)
        if existing and len(existing) == 43:
            return existing, False
        return secrets.token_urlsafe(32), True

    @staticmethod
    def csrf_ok(request: Request, submitted: str | None) -> str | None:
        """None when the POST is trustworthy, else why not."""
        origin = request.headers.get("origin")
        if origin and origin != "null":
            parts = urlsplit(origin)
            if parts.netloc != request.headers.get("host", ""):
                return "cross-site request refused (Origin does not match)"
        cookie = request.cookies.get(CSRF_COOKIE)
        value = submitted or request.headers.get(CSRF_HEADER)
        if not cookie or not value or not hmac.compare_digest(cookie, value):
            return "missing or wrong CSRF token: reload the page and try again"
        return None
