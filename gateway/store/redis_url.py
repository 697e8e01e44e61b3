"""Where and how to reach Redis, parsed once from `redis.url` (plus the config's TLS files) for both clients.

Why one parse: the hot path (resp.py) and the admin path (redis-py) used to read the URL each in its own way, so
`rediss://` gave TLS to one and plaintext to the other, and `unix://` silently became 127.0.0.1:6379. Now both build
their connections from the same `RedisEndpoint`, and a URL neither could honour is refused at start-up. A cluster
client would open one connection per node with `endpoint.at(host, port)`: the same transport, credentials and TLS.

    redis://[user:password@]host[:port][/db]
    rediss://[user:password@]host[:port][/db]        TLS (see TlsOptions for the certificate files)
    unix://[user:password@]/path/to/redis.sock[?db=N]
    redis+cluster://[user:password@]host:port[,host:port...]         Redis Cluster: seed nodes (db 0 only)
    rediss+cluster://...                                             the same over TLS
    redis+sentinel://[user:password@]host:port[,host:port...]/<master-name>[?db=N]
    rediss+sentinel://...                                            Sentinel: the sentinels, then the master's name

The topology is the scheme's, never a config flag, so one string says everything and nothing can contradict it:
several hosts in a plain redis:// URL are refused (which of the two was meant?). The credentials and TLS options
are the data nodes' (cluster nodes, Sentinel's master); sentinels themselves are asked without credentials.
"""

from __future__ import annotations

import dataclasses
import enum
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import parse_qs, unquote, urlparse

SCHEMES: Final = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")
DEFAULT_PORT: Final = 6379
DEFAULT_SENTINEL_PORT: Final = 26379


class Topology(enum.Enum):
    SINGLE = "single"
    """One server (or a proxy in front of many)."""
    CLUSTER = "cluster"
    """Redis Cluster: the slot map is learnt from `seeds` (cluster.py)."""
    SENTINEL = "sentinel"
    """Sentinel: `seeds` are the sentinels, asked for `master_name`'s address (sentinel.py)."""


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
    topology: Topology = Topology.SINGLE
    seeds: tuple[tuple[str, int], ...] = ()
    """Cluster: nodes to learn the slot map from; Sentinel: the sentinels. Empty for a single server."""
    master_name: str | None = None
    """Sentinel: the monitored master's name."""

    @property
    def address(self) -> str:
        """For log lines: never the credentials."""
        if self.unix_path:
            return f"unix:{self.unix_path}"
        if self.topology is not Topology.SINGLE:
            hosts = ",".join(f"{host}:{port}" for host, port in self.seeds)
            scheme = f"{'rediss' if self.tls else 'redis'}+{self.topology.value}"
            return f"{scheme}://{hosts}/{self.master_name or self.db}"
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}/{self.db}"

    def at(self, host: str, port: int) -> RedisEndpoint:
        """The same transport and credentials at another node (a cluster's, a replica's): a single server."""
        return dataclasses.replace(
            self, host=host, port=port, unix_path=None, topology=Topology.SINGLE, seeds=(), master_name=None
        )


def parse_redis_url(url: str, tls: TlsOptions | None = None) -> RedisEndpoint:
    """`tls` (the config's files) applies to rediss:// only; the URL's own ssl_* parameters override it."""
    parsed = urlparse(url)
    if parsed.scheme not in SCHEMES:
        raise RedisUrlError(
            f"unsupported Redis URL scheme {parsed.scheme + '://' if parsed.scheme else url!r}: "
            "want redis://host:port/db, rediss:// (TLS), unix:///path/to/redis.sock, "
            "redis+cluster://host:port[,host:port] or redis+sentinel://host:port[,host:port]/<master-name>"
        )
    if "+" in parsed.scheme:
        return _parse_topology(url, tls)
    if "," in parsed.netloc:
        raise RedisUrlError(
            f"several hosts in {_redacted(url)!r}: a Redis Cluster is redis+cluster://host:port,host:port, "
            "a Sentinel set is redis+sentinel://host:port,host:port/<master-name>"
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


def _parse_topology(url: str, tls: TlsOptions | None) -> RedisEndpoint:
    """redis[s]+cluster:// and redis[s]+sentinel://: the single-server parse of the URL with its host list
    replaced by the first host, plus the list."""
    parsed = urlparse(url)
    transport, _, kind = parsed.scheme.partition("+")
    topology = Topology(kind)
    userinfo, at, hostinfo = parsed.netloc.rpartition("@")
    default_port = DEFAULT_SENTINEL_PORT if topology is Topology.SENTINEL else DEFAULT_PORT
    seeds = tuple(_host_port(part, default_port, url) for part in hostinfo.split(",") if part)
    if not seeds:
        raise RedisUrlError(f"{parsed.scheme}:// needs at least one host:port")
    path = parsed.path.lstrip("/")
    master_name = None
    if topology is Topology.SENTINEL:
        master_name = unquote(path)
        if not master_name or "/" in master_name:
            raise RedisUrlError(
                f"{parsed.scheme}:// needs the master's name: {parsed.scheme}://host:port/<master-name>"
            )
        path = ""
    host, port = seeds[0]
    netloc = f"{userinfo}{at}{f'[{host}]' if ':' in host else host}:{port}"
    single = parse_redis_url(parsed._replace(scheme=transport, netloc=netloc, path="/" + path).geturl(), tls)
    if topology is Topology.CLUSTER and single.db != 0:
        raise RedisUrlError("a Redis Cluster has database 0 only: drop the /db or ?db= from the redis+cluster:// URL")
    return dataclasses.replace(single, topology=topology, seeds=seeds, master_name=master_name)


def _host_port(text: str, default_port: int, url: str) -> tuple[str, int]:
    host, port = text, ""
    if text.startswith("["):  # [::1]:7000
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif ":" in text:
        host, _, port = text.rpartition(":")
    if not host or (port and not port.isdigit()) or (port and not 0 < int(port) < 65536):
        raise RedisUrlError(f"bad host:port {text!r} in Redis URL {_redacted(url)!r}")
    return host, int(port) if port else default_port


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
