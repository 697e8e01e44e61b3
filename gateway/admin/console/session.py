"""The console's login session and CSRF tokens: stateless, so any gateway instance sharing the admin token accepts
a session another one issued, and nothing about sessions is stored anywhere.

    cookie   v1.<expires_at_s>.<nonce>.<mac>     mac = HMAC-SHA256(session key, "v1.<expires_at_s>.<nonce>")
    csrf     HMAC-SHA256(session key, "csrf.<nonce>")   one per session, sent back in every form
    key      HMAC-SHA256(admin token, "sluicegate console session")

The key comes from the admin token, so changing the token ends every session at once. The cookie is HttpOnly and
SameSite=Strict (a cross-site page can neither read it nor make the browser send it on a POST); the CSRF token is
the second line, for browsers or proxies that get SameSite wrong.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

COOKIE_NAME = "sluicegate_console"
SESSION_TTL_S = 8 * 3600
"""A working day: after it the operator logs in again."""
_VERSION = "v1"


@dataclass(frozen=True, slots=True)
class Session:
    nonce: str
    expires_at_s: int


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class SessionSigner:
    def __init__(self, admin_token: str) -> None:
        self._key = hmac.new(admin_token.encode(), b"sluicegate console session", hashlib.sha256).digest()
        self._token_digest = hashlib.sha256(admin_token.encode()).digest()

    def _mac(self, message: str) -> str:
        return _b64(hmac.new(self._key, message.encode(), hashlib.sha256).digest())

    def issue(self, now_s: float) -> tuple[Session, str]:
        """A new session and its cookie value."""
        session = Session(secrets.token_urlsafe(16), int(now_s) + SESSION_TTL_S)
        body = f"{_VERSION}.{session.expires_at_s}.{session.nonce}"
        return session, f"{body}.{self._mac(body)}"

    def verify(self, cookie: str | None, now_s: float) -> Session | None:
        """The session the cookie carries, or None when it is missing, forged, tampered with or expired."""
        if not cookie:
            return None
        body, _, mac = cookie.rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            return None
        version, _, rest = body.partition(".")
        expires, _, nonce = rest.partition(".")
        if version != _VERSION or not expires.isdigit() or not nonce:
            return None
        session = Session(nonce, int(expires))
        return session if now_s < session.expires_at_s else None

    def csrf_token(self, session: Session) -> str:
        return self._mac(f"csrf.{session.nonce}")

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest((given or "").encode(), self.csrf_token(session).encode())

    def token_ok(self, given: str) -> bool:
        """The login form's token against the admin token, in constant time (digests: no length leaks either)."""
        return hmac.compare_digest(hashlib.sha256(given.encode()).digest(), self._token_digest)
