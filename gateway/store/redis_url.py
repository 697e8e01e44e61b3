"""Where and how to reach Redis, parsed once from `redis.url` (plus the config's TLS files) for both clients.

Why one parse: the hot path (resp.py) and the admin path (redis-py) used to read the URL each in its own way, so
`rediss://` gave TLS to one and plaintext to the other, and `unix://` silently became 127.0.0.1:6379. Now both build
their connections from the same `RedisEndpoint`, and a URL neither could honour is refused at start-up. A cluster
client would open one connection per node with `endpoint.at(host, port)`: the same transport, credentials and TLS.

    redis://[user:password@]host[:port][/db]
    rediss://[user:password@]host[:port][/db]        TLS (see TlsOptions for the certificate files)
    unix://[user:password@]/path/to/redis.sock[?db=N]
"""

from __future__ import annotations

import dataclasses
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import parse_qs, unquote, urlparse

SCHEMES: Final = ("redis", "rediss", "unix")
DEFAULT_PORT: Final = 6379
CertReqs = Literal["required", "optional", "none"]
_CERT_REQS: Final = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
# URL query parameters, named as redis-py names them (so an existing URL keeps working); the config's `tls:` fields
# are the same four.
_QUERY_TLS: Final = {
    "ssl_ca_certs": "ca_file",
    "ssl_certfile": "cert_file",
    "ssl_keyfile": "key_file",
    "ssl_cert_reqs": "cert_reqs",
}


class RedisUrlError(ValueError):
    """The URL (or its TLS files) cannot be used; the message names what and the fix."""


@dataclass(frozen=True)
class TlsOptions:
    ca_file: str | None = None
    """PEM bundle of the CAs that sign the server's certificate; None: the system's trust store."""
    cert_file: str | None = None
    """Client certificate (PEM), for a server with `tls-auth-clients yes`."""
    key_file: str | None = None
    """The client certificate's private key (PEM); None: it is in cert_file."""
    cert_reqs: CertReqs = "required"
    """required: verify the server's certificate and host name; optional: verify a certificate if one is sent,
    without the host name; none: no verification (encrypted, not authenticated)."""

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        context.check_hostname = self.cert_reqs == "required"
        context.verify_mode = _CERT_REQS[self.cert_reqs]
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


@dataclass(frozen=True)
class RedisEndpoint:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    unix_path: str | None = None
    """A unix socket instead of host:port."""
    db: int = 0
    username: str | None = None
    """ACL user; None: `default` (AUTH with the password alone)."""
    password: str | None = None
    tls: TlsOptions | None = None
    """None: plaintext."""

    @property
    def address(self) -> str:
        """For log lines: never the credentials."""
        if self.unix_path:
            return f"unix:{self.unix_path}"
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}/{self.db}"

    def at(self, host: str, port: int) -> RedisEndpoint:
        """The same transport and credentials at another node (a cluster's, a replica's)."""
        return dataclasses.replace(self, host=host, port=port, unix_path=None)


def parse_redis_url(url: str, tls: TlsOptions | None = None) -> RedisEndpoint:
    """`tls` (the config's files) applies to rediss:// only; the URL's own ssl_* parameters override it."""
    parsed = urlparse(url)
    if parsed.scheme not in SCHEMES:
        raise RedisUrlError(
            f"unsupported Redis URL scheme {parsed.scheme + '://' if parsed.scheme else url!r}: "
            "want redis://host:port/db, rediss:// (TLS) or unix:///path/to/redis.sock"
        )
    query = {name: values[-1] for name, values in parse_qs(parsed.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - {"db", *_QUERY_TLS})
    if unknown:
        raise RedisUrlError(f"unknown Redis URL parameter(s) {unknown}: want db, {', '.join(_QUERY_TLS)}")
    tls_query: dict[str, Any] = {_QUERY_TLS[name]: value for name, value in query.items() if name in _QUERY_TLS}
    if tls_query and parsed.scheme != "rediss":
        raise RedisUrlError(f"{sorted(set(query) & set(_QUERY_TLS))} need a rediss:// URL")
    try:
        port = parsed.port
    except ValueError:
        raise RedisUrlError(f"bad port in Redis URL {_redacted(url)!r}") from None
    db_text = query.get("db") or (parsed.path.lstrip("/") if parsed.scheme != "unix" else "") or "0"
    if not db_text.isdigit():
        raise RedisUrlError(f"the Redis database must be a number, got {db_text!r}")
    endpoint = RedisEndpoint(
        host=parsed.hostname or "127.0.0.1",
        port=port or DEFAULT_PORT,
        db=int(db_text),
        username=unquote(parsed.username) if parsed.username else None,
        password=unquote(parsed.password) if parsed.password else None,
    )
    if parsed.scheme == "unix":
        if not parsed.path:
            raise RedisUrlError("a unix:// Redis URL needs the socket's path: unix:///path/to/redis.sock")
        return dataclasses.replace(endpoint, unix_path=unquote(parsed.path))
    if parsed.scheme == "rediss":
        options = dataclasses.replace(tls or TlsOptions(), **tls_query)
        return dataclasses.replace(endpoint, tls=checked_tls(options))
    return endpoint


def checked_tls(options: TlsOptions) -> TlsOptions:
    """Files that are missing or unreadable as PEM, and unknown cert_reqs, fail here (at start-up), not on every
    connection attempt later (which would look like an outage and serve fail-open buckets forever)."""
    if options.cert_reqs not in _CERT_REQS:
        raise RedisUrlError(f"ssl_cert_reqs must be one of {sorted(_CERT_REQS)}, got {options.cert_reqs!r}")
    for name in ("ca_file", "cert_file", "key_file"):
        path = getattr(options, name)
        if path is not None and not Path(path).is_file():
            raise RedisUrlError(f"redis TLS {name} {path!r} is not a file")
    if options.key_file and not options.cert_file:
        raise RedisUrlError("redis TLS key_file needs cert_file (the client certificate)")
    try:
        options.context()
    except (ssl.SSLError, OSError) as exc:
        raise RedisUrlError(f"redis TLS files cannot be loaded: {exc}") from None
    return options


def _redacted(url: str) -> str:
    parsed = urlparse(url)
    if parsed.password is None:
        return url
    return url.replace(f":{parsed.password}@", ":***@", 1)
