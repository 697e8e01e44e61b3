"""Every Redis transport the URL can name, on both the hot path (resp.py) and the admin path (redis-py): TLS with a
CA and client certificates made here, a unix socket with a db number, an ACL user; any other URL is refused at
start-up with a message naming the fix (rediss:// once spoke plaintext on the hot path and unix:// became
127.0.0.1:6379, each silently serving fail-open buckets forever)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import httpx
import pytest
import redis
import yaml

from gateway.config import ConfigError, config_from_dict
from gateway.metrics import GatewayMetrics
from gateway.store.redis_store import RedisStore
from gateway.store.redis_url import TlsOptions, parse_redis_url
from gateway.store.resilient import ResilientStore
from gateway.store.slots import key_slot
from tests.gateway.conftest import Admin, gateway_config, serve_gateway
from tests.gateway.redis_cluster_servers import ClusterServers, SentinelServers
from tests.gateway.redis_servers import RedisServer, make_certificates

CHAT = [{"role": "user", "content": "hi"}]
HANG_S = 30.0  # a liveness bound, not a timing goal: a start that has not returned by then hangs


def serve_through(fake, tokenizer_dir, url: str, **redis) -> tuple[int, str]:
    """A gateway on `url` (two instances' worth, so a fail-open answer would show rpm/2): serves three requests and
    returns the rate-limit header of the last and the tenant's id."""
    # a TLS handshake on a busy machine can take longer than the 0.2 s the other tests allow a call
    redis = {"socket_timeout_s": 2.0, **redis}
    config = gateway_config([fake.url], tokenizer_dir, url, prefix="tr:", num_instances=2, redis=redis)
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        tenant = admin.tenant(rpm=10)
        key = admin.key(tenant)
        for _ in range(3):
            response = httpx.post(
                gw.url + "/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": "tiny", "messages": CHAT, "max_tokens": 1},
                timeout=20,
            )
            assert response.status_code == 200, response.text
        assert httpx.get(gw.url + "/health").json()["redis"] == "up"
        assert admin.usage(tenant)["requests"] == 3
        return int(response.headers["x-ratelimit-remaining-requests"]), tenant


def test_tls_with_a_client_certificate(fake, tokenizer_dir, tmp_path):
    certs = make_certificates(tmp_path / "certs")
    server = RedisServer(tmp_path, tls=certs).start()
    try:
        tls = {"ca_file": certs.ca, "cert_file": certs.client_cert, "key_file": certs.client_key}
        remaining, tenant = serve_through(fake, tokenizer_dir, f"rediss://127.0.0.1:{server.port}/0", tls=tls)
        assert remaining == 7  # Redis' bucket (rpm 10), not a local one (rpm 10 / 2 instances)
        db = server.client()
        assert db.exists(f"tr:{{t:{tenant}}}:b:requests")  # the admission script ran over TLS
        db.close()
        # redis-py's spelling in the URL works too, and `none` skips verification (encrypted, not authenticated)
        query = f"ssl_certfile={certs.client_cert}&ssl_keyfile={certs.client_key}&ssl_cert_reqs=none"
        remaining, _ = serve_through(fake, tokenizer_dir, f"rediss://127.0.0.1:{server.port}/0?{query}")
        assert remaining == 7
    finally:
        server.stop()


def test_tls_to_a_cluster(fake, tokenizer_dir, tmp_path):
    """rediss+cluster://: the hot path's per-node connections and the admin path's RedisCluster both over TLS with
    a client certificate, on a cluster whose bus is TLS too."""
    certs = make_certificates(tmp_path / "certs")
    cluster = ClusterServers(tmp_path / "cluster", tls=certs).start()
    try:
        tls = {"ca_file": certs.ca, "cert_file": certs.client_cert, "key_file": certs.client_key}
        remaining, tenant = serve_through(fake, tokenizer_dir, cluster.url, tls=tls)
        assert remaining == 7  # the cluster's bucket (rpm 10), not a local one (rpm 10 / 2 instances)
        db = cluster.owner(key_slot(f"tr:{{t:{tenant}}}:tenant")).client()
        assert db.exists(f"tr:{{t:{tenant}}}:b:requests")  # the admission script ran on the slot's master
        db.close()
    finally:
        cluster.stop()


def test_tls_behind_sentinel(fake, tokenizer_dir, tmp_path):
    """rediss+sentinel://: the sentinel and the master it names are both reached over TLS (the same transport)."""
    certs = make_certificates(tmp_path / "certs")
    sentinel_set = SentinelServers(tmp_path / "sentinel", tls=certs).start()
    try:
        tls = {"ca_file": certs.ca, "cert_file": certs.client_cert, "key_file": certs.client_key}
        remaining, tenant = serve_through(fake, tokenizer_dir, sentinel_set.url, tls=tls)
        assert remaining == 7  # the master's bucket (rpm 10), not a local one
        db = sentinel_set.master.client()
        assert db.exists(f"tr:{{t:{tenant}}}:b:requests")
        db.close()
    finally:
        sentinel_set.stop()


def test_a_tls_client_at_a_plaintext_sentinel_is_an_outage_not_a_hang(tmp_path):
    """redis-py's Sentinel discovery waited a minute for a TLS handshake a plaintext sentinel never answers: every
    redis-py call is bounded as a whole, so the gateway starts on fail_open and says Redis is down."""
    certs = make_certificates(tmp_path / "certs")
    sentinel_set = SentinelServers(tmp_path / "sentinel").start()  # plaintext
    tls = TlsOptions(ca_file=certs.ca, cert_file=certs.client_cert, key_file=certs.client_key)
    endpoint = parse_redis_url(sentinel_set.url.replace("redis+", "rediss+"), tls)

    async def main() -> bool:
        store = ResilientStore(RedisStore(endpoint, "tr:", 0.5), "fail_open", 1.0, 1, GatewayMetrics())
        await asyncio.wait_for(store.start(), HANG_S)
        up = store.redis_up
        await store.close(flush_timeout_s=0.1)
        return up

    try:
        assert asyncio.run(main()) is False
    finally:
        sentinel_set.stop()


def test_tls_refuses_a_server_its_ca_did_not_sign(fake, tokenizer_dir, tmp_path):
    certs = make_certificates(tmp_path / "certs")
    other = make_certificates(tmp_path / "other")
    server = RedisServer(tmp_path, tls=certs).start()
    try:
        tls = {"ca_file": other.ca, "cert_file": certs.client_cert, "key_file": certs.client_key}
        config = gateway_config(
            [fake.url], tokenizer_dir, f"rediss://127.0.0.1:{server.port}/0", redis={"tls": tls}, num_instances=1
        )
        with serve_gateway(config) as gw:
            assert httpx.get(gw.url + "/health").json()["redis"] == "down"
    finally:
        server.stop()


def test_unix_socket_with_a_db_number(fake, tokenizer_dir, tmp_path):
    server = RedisServer(tmp_path, unix_socket=True).start()
    try:
        remaining, tenant = serve_through(fake, tokenizer_dir, f"unix://{server.socket_path}?db=2")
        assert remaining == 7
        assert server.client(db=2).exists(f"tr:{{t:{tenant}}}:b:requests")
        assert not server.client(db=0).keys("tr:*")
    finally:
        server.stop()


def test_acl_user_and_password(fake, tokenizer_dir, tmp_path):
    password = "p@ss:w/rd"  # percent-encoded in the URL
    acl = ["--user", "default", "off", "--user", "gw", "on", f">{password}", "~*", "&*", "+@all"]
    server = RedisServer(tmp_path, *acl, username="gw", password=password).start()
    try:
        with pytest.raises(redis.AuthenticationError):
            server.client(username=None, password=None).ping()  # the default user is off: only gw gets in
        encoded = password.replace("@", "%40").replace(":", "%3A").replace("/", "%2F")
        remaining, _ = serve_through(fake, tokenizer_dir, f"redis://gw:{encoded}@127.0.0.1:{server.port}/0")
        assert remaining == 7
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:6379", "unsupported Redis URL scheme 'http://'"),
        ("redis://a:1,b:2/0", "several hosts"),
        ("127.0.0.1:6379", "unsupported Redis URL scheme"),
        ("unix://", "needs the socket's path"),
        ("redis://127.0.0.1:6379/x", "database must be a number"),
        ("redis://127.0.0.1:6379/0?ssl_cert_reqs=none", "need a rediss:// URL"),
        ("redis://127.0.0.1:6379/0?timeout=3", "unknown Redis URL parameter"),
        ("rediss://127.0.0.1:6379/0?ssl_ca_certs=/nonexistent.pem", "is not a file"),
        ("rediss://127.0.0.1:6379/0?ssl_cert_reqs=maybe", "ssl_cert_reqs must be one of"),
    ],
)
def test_unusable_urls_are_refused_at_load(url, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"models": {"tiny": {"replicas": ["http://127.0.0.1:9"]}}, "redis": {"url": url}})


def test_the_command_refuses_an_unusable_url_with_a_clear_message(tmp_path):
    config = tmp_path / "gateway.yaml"
    url = f"memcached://127.0.0.1:{uuid.uuid4().int % 1000 + 20000}"
    config.write_text(yaml.safe_dump({"models": {"tiny": {"replicas": ["http://127.0.0.1:9"]}}, "redis": {"url": url}}))
    done = subprocess.run(
        [sys.executable, "-m", "sluicegate.cli", "gateway", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unsupported Redis URL scheme 'memcached://'" in done.stderr
