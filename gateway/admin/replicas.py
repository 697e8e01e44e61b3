"""The admin API's replica pools (`/admin/v1/models/{model}/replicas`): change a model's replicas at run time.

    GET    /models/{model}/replicas                 list, with health, breaker, load and KV-feed state
    POST   /models/{model}/replicas                 add {name, url, kv_events?, role?}   -> 201; re-adding a draining
                                                    replica with its URL and role puts it back in service; role:
                                                    prefill | decode | both (default)
    POST   /models/{model}/replicas/{name}/drain    no new requests; in-flight ones finish
    DELETE /models/{model}/replicas/{name}          drain, then forget it once its last request ends (none is lost)

A change applies to the gateway process that takes it. Replica pools live in each process's router, so with
`--workers N` a change would reach one worker of N: the API refuses it (409) and the config file is the way.
Several gateway instances each need the call.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.admin import audit
from gateway.admin.types import AdminGateway
from gateway.errors import ApiError, invalid_request
from gateway.routing.base import ReplicaAdmin, ReplicaInfo, Role
from gateway.routing.config import ReplicaConfig, RoutingConfigError, replica_config

ReadJson = Callable[[Request], Awaitable[dict[str, Any]]]

# A metrics label and a path segment: no spaces, no slashes.
REPLICA_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_FIELDS = frozenset({"name", "url", "kv_events", "role"})
_ROLES = tuple(Role)


def _admin(gw: AdminGateway, request: Request) -> ReplicaAdmin:
    model = request.path_params["model"]
    if model not in gw.config.models:
        raise ApiError(404, f"The gateway serves no model {model!r}.", code="model_not_found", param="model")
    if not isinstance(gw.router, ReplicaAdmin):
        raise ApiError(404, "This gateway's router does not manage replica pools.", code="not_supported")
    return gw.router


def check_changeable(gw: AdminGateway) -> None:
    if gw.config.workers > 1:
        raise ApiError(
            409,
            f"Replica changes reach one process of {gw.config.workers} (--workers): edit the "
            "config's replicas and restart instead.",
            code="not_supported",
        )


def _answer(call: Callable[..., ReplicaInfo], *args: object, status: int = 200) -> Response:
    return JSONResponse(dataclasses.asdict(applied(call, *args)), status_code=status)


def applied(call: Callable[..., ReplicaInfo], *args: object) -> ReplicaInfo:
    """A ReplicaAdmin change made (`call(model, name, ...)`: add_replica, drain_replica, remove_replica) and written
    to the audit log; its refusals as the API's errors (404 unknown, 409 a name taken)."""
    try:
        info = call(*args)
    except KeyError as exc:  # UnknownReplicaError
        raise ApiError(404, str(exc.args[0] if exc.args else exc), code="replica_not_found", param="name") from None
    except ValueError as exc:
        raise ApiError(409, str(exc), code="replica_exists", param="name") from None
    action = "replica." + getattr(call, "__name__", "change").removesuffix("_replica")
    audit.record(action, model=str(args[0]), replica=str(args[1]), after=dataclasses.asdict(info))
    return info


async def list_replicas(request: Request, store: object, gw: AdminGateway) -> Response:
    router = _admin(gw, request)
    infos = router.replicas(request.path_params["model"])
    return JSONResponse({"data": [dataclasses.asdict(info) for info in infos]})


async def add_replica(request: Request, store: object, gw: AdminGateway, read_json: ReadJson) -> Response:
    router = _admin(gw, request)
    check_changeable(gw)
    new = new_replica(await read_json(request))
    return _answer(router.add_replica, request.path_params["model"], *replica_args(new), status=201)


def new_replica(body: dict[str, Any]) -> ReplicaConfig:
    """An add request's replica, checked; a 400 naming the bad field."""
    unknown = set(body) - _FIELDS
    if unknown:
        raise invalid_request(
            f"unknown replica fields {sorted(unknown)}; known: {', '.join(sorted(_FIELDS))}", param=sorted(unknown)[0]
        )
    name, kv_events, role = body.get("name"), body.get("kv_events", True), body.get("role", Role.BOTH)
    if not isinstance(name, str) or not REPLICA_NAME_RE.match(name):
        raise invalid_request(f"name must match {REPLICA_NAME_RE.pattern}, got {name!r}", param="name")
    if not isinstance(kv_events, bool):
        raise invalid_request(f"kv_events must be true or false, got {kv_events!r}", param="kv_events")
    if role not in _ROLES:
        raise invalid_request(f"role must be one of {', '.join(_ROLES)}, got {role!r}", param="role")
    try:
        return replica_config(name=name, url=body.get("url"), kv_events=kv_events, role=role)
    except RoutingConfigError as exc:
        raise invalid_request(str(exc), param="url") from None


def replica_args(new: ReplicaConfig) -> tuple[str, str, bool, Role]:
    """ReplicaAdmin.add_replica's arguments after the model."""
    return new.name, new.url, new.kv_events, new.role


async def drain_replica(request: Request, store: object, gw: AdminGateway) -> Response:
    router = _admin(gw, request)
    check_changeable(gw)
    return _answer(router.drain_replica, request.path_params["model"], request.path_params["name"])


async def remove_replica(request: Request, store: object, gw: AdminGateway) -> Response:
    router = _admin(gw, request)
    check_changeable(gw)
    return _answer(router.remove_replica, request.path_params["model"], request.path_params["name"])
