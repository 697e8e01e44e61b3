"""Redis topologies of a test's own on free ports: a 3-master Redis Cluster (redis-cli --cluster create) and a
Sentinel set (one master, one replica, one sentinel), with the moves the tests make on them: migrating one slot
from node to node, and a Sentinel failover."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import redis
from redis.cluster import RedisCluster

from tests.gateway.redis_servers import Certificates, RedisServer
from tests.gateway.servers import free_port

READY_TIMEOUT_S = 30.0


def cluster_node_port(taken: set[int]) -> int:
    """A free port whose cluster bus port (port + 10000) is free too, and a port at all (under 65536), neither of them
    in `taken` (the ports and bus ports of the nodes picked before, not yet listening: a CI run picked a node's port
    equal to an earlier node's bus port, and that cluster never formed). Adds both to `taken`."""
    while True:
        port = free_port()
        if port + 10000 < 65536 and not {port, port + 10000} & taken:
            with socket.socket() as bus:
                try:
                    bus.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            taken.update((port, port + 10000))
            return port


def _wait(predicate, what: str, timeout_s: float = READY_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = predicate()
            if value:
                return value
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {timeout_s}s")
        time.sleep(0.05)


class ClusterServers:
    """Three masters, slots split evenly by redis-cli; with `replicas`, that many replicas of each master (which take
    over a master that stops answering for `node_timeout_ms`)."""

    def __init__(
        self,
        root: Path,
        masters: int = 3,
        replicas: int = 0,
        node_timeout_ms: int = 5000,
        tls: Certificates | None = None,
    ):
        self.replicas = replicas
        self.tls = tls  # TLS for clients, the cluster bus and replication alike
        self.nodes = []
        for i in range(masters * (1 + replicas)):
            folder = root / f"node{i}"
            folder.mkdir(parents=True, exist_ok=True)
            cluster = ["--cluster-enabled", "yes", "--cluster-config-file", str(folder / "nodes.conf")]
            cluster += ["--cluster-node-timeout", str(node_timeout_ms), "--appendonly", "no"]
            if tls:
                cluster += ["--tls-cluster", "yes", "--tls-replication", "yes"]
            self.nodes.append(RedisServer(folder, *cluster, tls=tls))
        self._pick_ports()

    @property
    def url(self) -> str:
        scheme = "rediss+cluster" if self.tls else "redis+cluster"
        return f"{scheme}://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes[:2])

    def start(self) -> ClusterServers:
        """Start the nodes and form the cluster. A cluster that does not form is torn down and formed once more on
        fresh ports with empty configs: a CI run saw one node never reach cluster_state:ok (cause not found; the same
        fixture formed in every other run), and a test of the gateway should not fail on its fixture's luck."""
        try:
            return self._form()
        except (RuntimeError, subprocess.SubprocessError):
            self.stop()
            for node in self.nodes:
                (node.dir / "nodes.conf").unlink(missing_ok=True)
            self._pick_ports()
            try:
                return self._form()
            except BaseException:
                self.stop()  # the fixture never gets the object to stop: no node outlives the test run
                raise

    def _pick_ports(self) -> None:
        taken: set[int] = set()
        for node in self.nodes:
            node.port = cluster_node_port(taken)

    def _form(self) -> ClusterServers:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        tls = []
        if self.tls:
            tls = ["--tls", "--cacert", self.tls.ca, "--cert", self.tls.client_cert, "--key", self.tls.client_key]
        subprocess.run(
            [
                "redis-cli",
                *tls,
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],  # fmt: skip
            check=True,
            capture_output=True,
            timeout=60,
        )
        for node in self.nodes:
            _wait(lambda node=node: self._ready(node), f"cluster_state:ok on {node.port}")
        return self

    def _ready(self, node: RedisServer) -> bool:
        client = node.client()
        try:
            info = client.cluster("info")
            return info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == len(self.nodes)
        finally:
            client.close()

    def client(self) -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=self.nodes[0].port, decode_responses=True)

    def node_id(self, node: RedisServer) -> str:
        client = node.client()
        try:
            return client.execute_command("CLUSTER", "MYID").decode()
        finally:
            client.close()

    def owner(self, slot: int, via: RedisServer | None = None) -> RedisServer:
        """The master serving `slot`, as `via` (default: the first node) sees the cluster."""
        client = (via or self.nodes[0]).client()
        try:
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return next(node for node in self.nodes if node.port == master[1])
        finally:
            client.close()
        raise LookupError(slot)

    def begin_migration(self, slot: int, source: RedisServer, target: RedisServer) -> None:
        """IMPORTING on the target, MIGRATING on the source, then every key of the slot moved: the source now
        answers ASK for them, and the target serves them to a client that says ASKING."""
        source_client, target_client = source.client(), target.client()
        try:
            target_client.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
            source_client.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
            while keys := source_client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                source_client.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        finally:
            source_client.close()
            target_client.close()

    def end_migration(self, slot: int, target: RedisServer) -> None:
        """The slot is the target's: every node says so (the source answers MOVED from now on)."""
        target_id = self.node_id(target)
        for node in [target, *(n for n in self.nodes if n is not target)]:
            client = node.client()
            try:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
            finally:
                client.close()
        _wait(lambda: self.owner(slot) is target, f"slot {slot} owned by {target.port}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class SentinelServers:
    """A master, its replica and one sentinel watching them under `name`. The data nodes refuse writes without
    a replica in sync (min-replicas-to-write 1, acknowledged within the last second), so a write can never land on a
    master that a failover is leaving behind (it would be lost when it rejoins as a replica), nor on one whose replica
    has fallen behind (on a loaded machine; a failover would promote the stale copy)."""

    def __init__(self, root: Path, name: str = "sluicegate", tls: Certificates | None = None):
        self.name = name
        self.root = root
        self.tls = tls  # TLS everywhere: the data nodes (clients and replication) and the sentinel
        safe = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "1", "--appendonly", "no"]
        safe += ["--repl-diskless-sync-delay", "0"]  # the demoted master syncs at once, not 5 s later
        if tls:
            safe += ["--tls-replication", "yes"]
        (root / "master").mkdir(parents=True, exist_ok=True)
        (root / "replica").mkdir(parents=True, exist_ok=True)
        self.master = RedisServer(root / "master", *safe, tls=tls)
        replica_of = ["--replicaof", "127.0.0.1", str(self.master.port)]
        self.replica = RedisServer(root / "replica", *safe, *replica_of, tls=tls)
        self.sentinel_port = free_port()
        self._sentinel: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
        return f"{scheme}://127.0.0.1:{self.sentinel_port}/{self.name}"

    def start(self) -> SentinelServers:
        self.master.start()
        self.replica.start()
        conf = self.root / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel_port}\nbind 127.0.0.1\ndir {self.root}\n"
            f"sentinel monitor {self.name} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel down-after-milliseconds {self.name} 2000\n"
            f"sentinel failover-timeout {self.name} 5000\n"
        )
        if self.tls:  # TLS only, as the data nodes: it answers over TLS and reaches them over TLS
            text = conf.read_text().replace(f"port {self.sentinel_port}\n", f"port 0\ntls-port {self.sentinel_port}\n")
            conf.write_text(
                text + "tls-replication yes\n"
                f"tls-cert-file {self.tls.server_cert}\ntls-key-file {self.tls.server_key}\n"
                f"tls-ca-cert-file {self.tls.ca}\n"
            )
        self._sentinel = subprocess.Popen(
            ["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _wait(self._replica_known, "the sentinel knowing the replica")
        return self

    def sentinel(self) -> redis.Redis:
        tls = {}
        if self.tls:
            tls = dict(
                ssl=True, ssl_ca_certs=self.tls.ca, ssl_certfile=self.tls.client_cert, ssl_keyfile=self.tls.client_key
            )
        return redis.Redis(host="127.0.0.1", port=self.sentinel_port, decode_responses=True, **tls)

    def _replica_known(self) -> bool:
        sentinel = self.sentinel()
        try:
            replicas = sentinel.execute_command("SENTINEL", "REPLICAS", self.name)
        finally:
            sentinel.close()
        for replica in replicas:
            fields = dict(zip(replica[::2], replica[1::2])) if isinstance(replica, list) else replica
            if int(fields["port"]) == self.replica.port and fields["master-link-status"] == "ok":
                return "disconnected" not in fields["flags"] and "s_down" not in fields["flags"]
        return False

    def master_port(self) -> int:
        sentinel = self.sentinel()
        try:
            return int(sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.name)[1])
        finally:
            sentinel.close()

    def failover(self) -> None:
        """SENTINEL FAILOVER once the replica holds everything written so far (a planned failover; SENTINEL FAILOVER
        itself does not wait), then wait until the replica is master and the old master replicates from it (the
        sentinel tells the old master so at its next INFO round: up to 10 s)."""
        written = _offset(self.master, "master_repl_offset")
        _wait(lambda: _offset(self.replica, "slave_repl_offset") >= written, "the replica caught up")
        sentinel = self.sentinel()
        try:
            sentinel.execute_command("SENTINEL", "FAILOVER", self.name)
        finally:
            sentinel.close()
        _wait(lambda: self.master_port() == self.replica.port, "the sentinel naming the replica as master")
        _wait(lambda: _role(self.replica) == "master", "the replica's promotion")
        _wait(lambda: _role(self.master) == "slave" and _link_up(self.master), "the old master following it")

    def stop(self) -> None:
        if self._sentinel is not None and self._sentinel.poll() is None:
            self._sentinel.kill()
            self._sentinel.wait()
        self.replica.stop()
        self.master.stop()


def _role(node: RedisServer) -> str:
    client = node.client()
    try:
        return client.info("replication")["role"]
    finally:
        client.close()


def _offset(node: RedisServer, field: str) -> int:
    client = node.client()
    try:
        return int(client.info("replication").get(field, -1))
    finally:
        client.close()


def _link_up(node: RedisServer) -> bool:
    client = node.client()
    try:
        return client.info("replication").get("master_link_status") == "up"
    finally:
        client.close()
