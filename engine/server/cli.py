"""`sluicegate engine --model DIR [--port 8100] [--max-num-seqs N] ...`: one replica under uvicorn.

Every EngineConfig and ServerConfig field is a flag (`max_num_seqs` -> `--max-num-seqs`, booleans get `--no-...`,
tuples take several values: `--cuda-graph-sizes 1 2 4`), its help the field's docstring;
`--config FILE` reads a YAML file with `engine:` and `server:` sections (config/engine.yaml), and flags override it.

Exit status: 0 after a clean shutdown (SIGTERM/SIGINT drain), 1 when the engine loop crashed, 2 for bad settings.
"""

from __future__ import annotations

import os

# Read by the OpenMP runtime when torch loads (engine.llm_engine, imported in main): idle pool threads sleep rather
# than spin, so a replica between ops does not take the core a neighbour (the other replica, the gateway) is
# working on. The environment's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import asyncio
import concurrent.futures
import contextlib
import logging
import signal
import socket
import sys
import threading
import types
import typing

import uvicorn
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from engine.config import EngineConfig
from engine.server.app import create_app
from engine.server.config import ServerConfig
from engine.server.errors import OverloadedError
from sluicegate import tracing
from sluicegate.addresses import listening_urls
from sluicegate.schema import explain

logger = logging.getLogger(__name__)

_DRAIN_POLL_S = 0.05
_SHUTDOWN_GRACE_S = 5  # seconds (uvicorn takes an int)
_KEEP_ALIVE_S = 75  # seconds an idle client connection stays open


class ReplicaServer(uvicorn.Server):
    """uvicorn.Server that drains on SIGTERM and exits non-zero when the engine loop dies.

    Draining (SIGTERM or SIGINT): the socket stays open, so routers see /health 503 and new requests get 503 with
    Retry-After rather than a refused connection; requests in flight run to completion for up to drain_timeout_s.
    Past that the engine stops and what is still open ends with an error (a stream: an error event, then [DONE]).
    Only then does uvicorn shut down. A second signal skips the rest of the drain.
    """

    def __init__(self, llm_engine, config: ServerConfig):
        self.exit_code = 0
        self.drain_timeout_s = config.drain_timeout_s
        self._model_name: str = llm_engine.model_name
        self.app = create_app(llm_engine, config, on_fatal=self._on_fatal)
        super().__init__(
            uvicorn.Config(
                self.app,
                host=config.host,
                port=config.port,
                log_level=config.log_level,
                # The drain already waited; this only bounds the responses that end once the engine stopped.
                timeout_graceful_shutdown=_SHUTDOWN_GRACE_S,
                # Past clients' own idle expiry (openai's 5 s; the gateway's pool gives connections up at 4 s), so
                # a request is never sent on a connection the replica is just closing (gateway/cli.py KEEP_ALIVE_S).
                timeout_keep_alive=_KEEP_ALIVE_S,
                lifespan="on",
            )
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_future: concurrent.futures.Future | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # exits the process (status 3) when it cannot bind
        logger.info("serving %s on %s", self._model_name, listening_urls(self.servers))  # once bound: port 0's port

    @contextlib.contextmanager
    def capture_signals(self):
        # uvicorn's own version re-raises the signal after shutdown, so a replica that drained cleanly would exit
        # "killed by SIGTERM"; here a clean drain exits 0 and only an engine crash is an error.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig, frame) -> None:
        # Signal handlers run between bytecodes; touch loop state only from the loop itself.
        if self._loop is None or self._drain_future is not None:
            super().handle_exit(sig, frame)  # not serving yet, or a second signal: stop now
            return
        self._drain_future = asyncio.run_coroutine_threadsafe(self._drain(), self._loop)

    async def _drain(self) -> None:
        replica = self.app.state.replica
        replica.begin_drain()
        try:
            await asyncio.wait_for(self._requests_done(), self.drain_timeout_s)
        except TimeoutError:
            logger.warning("drain timeout (%g s) ran out: ending the requests still in flight", self.drain_timeout_s)
            await replica.engine.stop(
                OverloadedError(
                    f"This replica shut down before the request finished (drain timeout {self.drain_timeout_s:g} s); "
                    "retry on another.",
                    replica.config.retry_after_s,
                )
            )
        finally:
            self.should_exit = True  # whatever happened above, the process must not linger

    async def _requests_done(self) -> None:
        # uvicorn holds one task per HTTP request being served, until its response (a stream too) is complete.
        while self.server_state.tasks:
            await asyncio.sleep(_DRAIN_POLL_S)

    def _on_fatal(self, exc: BaseException) -> None:
        self.exit_code = 1
        self.should_exit = True


def serve(llm_engine, config: ServerConfig, sockets: list[socket.socket] | None = None) -> int:
    server = ReplicaServer(llm_engine, config)
    server.run(sockets=sockets)
    return server.exit_code


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        engine_config, server_config = build_configs(args)
    except (ValueError, TypeError, OSError) as exc:
        print(f"sluicegate engine: {explain(exc) if isinstance(exc, ValidationError) else exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=server_config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from engine.llm_engine import LLMEngine

    try:
        llm_engine = LLMEngine(engine_config)
    except FileNotFoundError as exc:  # the model folder or a file in it: a bad setting, not a crash
        print(f"sluicegate engine: {exc}", file=sys.stderr)
        return 2
    # OTLP export when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set; tracing stays off otherwise.
    tracing.configure_tracing(tracing.TracingConfig("sluicegate-engine"))
    return serve(llm_engine, server_config)


def build_configs(args: argparse.Namespace) -> tuple[EngineConfig, ServerConfig]:
    sections = _read_yaml(args.config) if args.config else {}
    engine_kwargs = {**sections.get("engine", {}), **_given(args, EngineConfig)}
    server_kwargs = {**sections.get("server", {}), **_given(args, ServerConfig)}
    if "model" not in engine_kwargs:
        raise ValueError("--model DIR is required (a local Hugging Face model folder)")
    return EngineConfig(**engine_kwargs), ServerConfig(**server_kwargs)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluicegate engine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="YAML file with engine: and server: sections")
    for cls in (EngineConfig, ServerConfig):
        group = parser.add_argument_group(cls.__name__)
        for name, info in cls.model_fields.items():
            _add_flag(group, name, info)
    return parser


_ALIASES: dict[str, tuple[str, ...]] = {"kv_role": ("--role",)}
"""Second names of some flags: `--role prefill|decode|both` is what the disaggregation design calls it, `--kv-role`
vLLM's (its kv_transfer_config.kv_role)."""


def _add_flag(group, name: str, info: FieldInfo) -> None:
    flags = ("--" + name.replace("_", "-"), *_ALIASES.get(name, ()))
    help_text = " ".join((info.description or "").split()).replace("%", "%%")  # the field's docstring
    if info.default is not PydanticUndefined:
        help_text = f"{help_text} (default: {info.default})".strip()
    kind, many = _flag_type(info.annotation)
    if kind is bool:
        group.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
    elif kind in (int, float):
        group.add_argument(
            *flags,
            dest=name,
            type=kind,
            nargs="+" if many else None,
            default=None,
            metavar="N" if kind is int else "X",
            help=help_text,
        )
    else:
        group.add_argument(*flags, dest=name, default=None, help=help_text)


def _flag_type(annotation) -> tuple[type, bool]:
    """(the scalar a flag parses, whether it takes several): `Annotated[int, ...] | None` -> (int, False),
    `tuple[int, ...]` -> (int, True); Literal choices and paths stay str."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _flag_type(args[0])
    if origin in (typing.Union, types.UnionType):
        return _flag_type(next(arg for arg in args if arg is not type(None)))
    if origin is tuple:
        return _flag_type(args[0])[0], True
    return (annotation if annotation in (bool, int, float) else str), False


def _given(args: argparse.Namespace, cls) -> dict:
    given = {name: getattr(args, name) for name in cls.model_fields if getattr(args, name) is not None}
    return {name: tuple(value) if isinstance(value, list) else value for name, value in given.items()}


def _read_yaml(path: str) -> dict:
    import yaml

    from sluicegate.yaml_files import load_yaml

    with open(path, encoding="utf-8") as fh:
        try:
            data = load_yaml(fh) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict) or set(data) - {"engine", "server"}:
        raise ValueError(f"{path}: expected top-level 'engine:' and 'server:' sections only")
    return data
