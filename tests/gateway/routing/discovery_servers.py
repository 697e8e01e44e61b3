"""Real servers the discovery tests stand up on loopback: a DNS server (dnspython's wire format over UDP), a stand-in
for the Kubernetes API's EndpointSlice list (plain Starlette, HTTPS with a certificate made by `openssl`), and uvicorn
on a chosen loopback address (127.0.0.2, 127.0.0.3, ...: A records carry no port, so replicas share one)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.gateway.servers import ThreadServer


class DnsServer:
    """Answers from `records`: {(name with final dot, "A"|"AAAA"|"SRV"): [rdata text]}; a name with no record of any
    type is NXDOMAIN. `rcode` set to SERVFAIL (or REFUSED) fails every query; `silent` drops them (a timeout)."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], list[str]] = {}
        self.rcode: int = dns.rcode.NOERROR
        self.silent = False
        self.queries = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> DnsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                wire, peer = self._sock.recvfrom(4096)
            except TimeoutError:
                continue
            self.queries += 1
            if self.silent:
                continue
            self._sock.sendto(self._answer(dns.message.from_wire(wire)).to_wire(), peer)

    def _answer(self, query: dns.message.Message) -> dns.message.Message:
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        question = query.question[0]
        name, rdtype = question.name.to_text(), dns.rdatatype.to_text(question.rdtype)
        if self.rcode != dns.rcode.NOERROR:
            response.set_rcode(self.rcode)
        elif not any(key[0] == name for key in self.records):
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif self.records.get((name, rdtype)):
            response.answer.append(dns.rrset.from_text_list(name, 5, "IN", rdtype, self.records[(name, rdtype)]))
        return response  # NOERROR without records: the name exists, not with this type


class EndpointSliceApi:
    """GET /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io/service-name=S,
    answering `slices[(ns, service)]` as an EndpointSliceList when the bearer token is `token`; `status` other than
    200 answers that status with a Kubernetes Status object instead."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.slices: dict[tuple[str, str], list[dict]] = {}
        self.status = 200
        self.requests: list[tuple[str, str, str]] = []  # (namespace, label selector, authorization)
        self.app = Starlette(
            routes=[Route("/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", self.list_slices)]
        )

    async def list_slices(self, request: Request) -> JSONResponse:
        namespace = request.path_params["namespace"]
        selector = request.query_params.get("labelSelector", "")
        auth = request.headers.get("authorization", "")
        self.requests.append((namespace, selector, auth))
        if self.status != 200:
            return JSONResponse(_status(self.status, "injected failure"), status_code=self.status)
        if auth != f"Bearer {self.token}":
            return JSONResponse(_status(401, "Unauthorized"), status_code=401)
        service = selector.removeprefix("kubernetes.io/service-name=")
        items = self.slices.get((namespace, service), [])
        return JSONResponse(
            {
                "kind": "EndpointSliceList",
                "apiVersion": "discovery.k8s.io/v1",
                "metadata": {"resourceVersion": str(len(self.requests))},
                "items": items,
            }
        )


def _status(code: int, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}


def endpoint_slice(service: str, namespace: str, port: int, endpoints: list[dict], port_name: str = "http") -> dict:
    """One EndpointSlice as the API serves it (discovery.k8s.io/v1)."""
    return {
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {
            "name": f"{service}-abc12",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": "x"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": service, "uid": "u-1"}],
        },
        "addressType": "IPv4",
        "ports": [{"name": port_name, "protocol": "TCP", "port": port}],
        "endpoints": endpoints,
    }


def pod_endpoint(pod: str, address: str, ready: bool | None = True, terminating: bool = False) -> dict:
    conditions: dict = {"serving": ready, "terminating": terminating}
    if ready is not None:
        conditions["ready"] = ready
    return {
        "addresses": [address],
        "conditions": conditions,
        "targetRef": {"kind": "Pod", "namespace": "llm", "name": pod, "uid": f"uid-{pod}"},
        "nodeName": "gpu-node-1",
        "zone": "zone-a",
    }


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (the API server's stand-in) and its key, made by the openssl command."""
    cert, key = folder / "apiserver.crt", folder / "apiserver.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def LoopbackServer(app, host: str = "127.0.0.1", port: int = 0, certfile: Path | None = None, keyfile=None):  # noqa: N802
    """uvicorn serving `app` on host:port (port 0: a free one), in a thread, no lifespan; TLS when given a
    certificate (tests/gateway/servers.py's ThreadServer)."""
    return ThreadServer(app, lifespan="off", host=host, port=port, certfile=certfile, keyfile=keyfile)


@contextlib.contextmanager
def replicas_on_one_port(apps: list, first_host: int = 2) -> Iterator[tuple[int, list[ThreadServer]]]:
    """Serve each app on 127.0.0.<first_host + i>, all on one port (as Pods behind a headless Service are)."""
    probe = socket.socket()
    probe.bind((f"127.0.0.{first_host}", 0))
    port = probe.getsockname()[1]
    probe.close()
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(LoopbackServer(app, f"127.0.0.{first_host + i}", port)) for i, app in enumerate(apps)
        ]
        yield port, servers
