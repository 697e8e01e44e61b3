"""`sluicegate engine --model DIR [--port 8100] [--max-num-seqs N] ...`: one replica under uvicorn.

Every EngineConfig and ServerConfig field is a flag (`max_num_seqs` -> `--max-num-seqs`, booleans get `--no-...`);
`--config FILE` reads a YAML file with `engine:` and `server:` sections (config/engine.yaml), and flags override it.

Exit status: 0 after a clean shutdown (SIGTERM/SIGINT drain), 1 when the engine loop crashed, 2 for bad settings.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import concurrent.futures
import contextlib
import dataclasses
import inspect
import logging
import signal
import socket
import sys
import textwrap
import threading

import uvicorn

from engine.config import EngineConfig
from engine.server.app import create_app
from engine.server.config import ServerConfig
from engine.server.errors import OverloadedError
from sluicegate import tracing

logger = logging.getLogger(__name__)

_DRAIN_POLL_S = 0.05
_SHUTDOWN_GRACE_S = 5.0


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
        self.app = create_app(llm_engine, config, on_fatal=self._on_fatal)
        super().__init__(
            uvicorn.Config(
                self.app,
                host=config.host,
                port=config.port,
                log_level=config.log_level,
                # The drain already waited; this only bounds the responses that end once the engine stopped.
                timeout_graceful_shutdown=_SHUTDOWN_GRACE_S,
                lifespan="on",
            )
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_future: concurrent.futures.Future | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

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
        print(f"sluicegate engine: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=server_config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from engine.llm_engine import LLMEngine

    llm_engine = LLMEngine(engine_config)
    # OTLP export when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set; tracing stays off otherwise.
    tracing.configure_tracing(tracing.TracingConfig("sluicegate-engine"))
    logger.info("serving %s on http://%s:%d", llm_engine.model_name, server_config.host, server_config.port)
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
        docs = _field_docs(cls)
        for f in dataclasses.fields(cls):
            _add_flag(group, f, docs.get(f.name, ""))
    return parser


def _add_flag(group, f: dataclasses.Field, help_text: str) -> None:
    flag = "--" + f.name.replace("_", "-")
    kind = str(f.type).split("|")[0].strip()  # "int | None" -> "int"
    if f.default is not dataclasses.MISSING:
        help_text = f"{help_text} (default: {f.default})".strip()
    if kind == "bool":
        group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
    elif kind == "int":
        group.add_argument(flag, dest=f.name, type=int, default=None, metavar="N", help=help_text)
    elif kind == "float":
        group.add_argument(flag, dest=f.name, type=float, default=None, metavar="X", help=help_text)
    else:
        group.add_argument(flag, dest=f.name, default=None, help=help_text)


def _field_docs(cls) -> dict[str, str]:
    """The docstring under each field of a config dataclass: the one place its meaning is written."""
    docs, previous = {}, None
    for node in ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            previous = node.target.id
        elif previous and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            docs[previous] = " ".join(str(node.value.value).split()).replace("%", "%%")
            previous = None
        else:
            previous = None
    return docs


def _given(args: argparse.Namespace, cls) -> dict:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if getattr(args, f.name) is not None}


def _read_yaml(path: str) -> dict:
    import yaml

    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict) or set(data) - {"engine", "server"}:
        raise ValueError(f"{path}: expected top-level 'engine:' and 'server:' sections only")
    return data
