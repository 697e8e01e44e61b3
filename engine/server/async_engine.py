"""The engine thread: runs an LLMEngine beside the event loop, which never waits on a step.

    event loop                                   engine thread (owns the LLMEngine; it is not thread-safe)
    ----------                                   -------------------------------------------------------
    add_requests() -> command queue  ------->    between steps: add / abort / snapshot commands
    abort()        -> command queue  ------->    step(); take_kv_events() numbered with the next sequence numbers
    _deliver()  <-- call_soon_threadsafe  <--    one callback per iteration: outputs, KV events, stats

call_soon_threadsafe callbacks run in the order they were made, so an add's result reaches the loop before its first
output, and a snapshot after every event it includes. If the loop dies (any exception from the engine), the loop side
fails every waiting request, refuses new ones, and calls `on_fatal` so the process exits non-zero.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from opentelemetry import context as otel_context

from engine.errors import RequestError
from engine.kv_transfer.params import KVTransferRequest, RemotePrefill
from engine.kv_transfer.planner import PullRefusal
from engine.kv_transfer.pull_plan import PullPlan
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams
from engine.server.errors import (
    APIError,
    EngineUnavailableError,
    InternalServerError,
    InvalidRequestError,
    OverloadedError,
    from_request_error,
)
from engine.server.kv_events import KVEventHub, SequencedEvent, Snapshot
from engine.server.metrics import ServerMetrics
from engine.structured.spec import GrammarSpec
from sluicegate import tracing

logger = logging.getLogger(__name__)

_STOP = object()
# Engine stamps are time.monotonic(); spans want wall-clock nanoseconds.
_MONOTONIC_TO_EPOCH_NS = time.time_ns() - time.monotonic_ns()
IDLE_BACKOFF_S = 0.001


@dataclass
class _AddGroup:
    """Engine requests of one HTTP request (one per prompt); added all or none."""

    request_ids: list[str]
    prompts: list[list[int]]
    params: SamplingParams
    cache_salt: str
    future: asyncio.Future
    kv_transfer: KVTransferRequest | None = None
    pulled: PullPlan | None = None  # blocks read for prompts[0] (disaggregated decode: one prompt, n = 1)


@dataclass
class _Abort:
    request_ids: list[str]


@dataclass
class _PlanPull:
    prompt: list[int]
    cache_salt: str
    remote: RemotePrefill
    future: asyncio.Future


@dataclass
class _CancelPull:
    plan: PullPlan


@dataclass
class _Handoffs:
    """Prefill side: free the handoffs decode replicas have read, and those past their deadline."""

    read_request_ids: list[str]


@dataclass
class _TakeSnapshot:
    future: asyncio.Future


class OutputStream:
    """Outputs of one HTTP request's engine requests, as (prompt_index, RequestOutput), until all finish."""

    def __init__(self, request_ids: list[str], arrival_time_s: float, metrics: ServerMetrics, num_choices: int = 1):
        self.request_ids = request_ids
        self.num_choices = num_choices  # per engine request (n): vllm:request_success counts each
        self.arrival_time_s = arrival_time_s
        self.finished = False
        self._metrics = metrics
        self._queue: asyncio.Queue = asyncio.Queue()
        self._num_unfinished = len(request_ids)
        self._last_token_time_s: list[float | None] = [None] * len(request_ids)
        # The HTTP request's span (TracingMiddleware keeps it current in the handler that creates this stream):
        # queue / prefill / decode spans are recorded under it when each engine request finishes.
        self.trace_context = otel_context.get_current() if tracing.enabled() else None

    def put(self, prompt_index: int, output: RequestOutput, now_s: float) -> None:
        self._observe(prompt_index, output, now_s)
        self._queue.put_nowait((prompt_index, output))
        if output.finished:
            self._num_unfinished -= 1
            if self._num_unfinished == 0:
                self.finished = True
                self._queue.put_nowait(None)

    def fail(self, exc: Exception) -> None:
        self.finished = True
        self._queue.put_nowait(exc)

    async def __aiter__(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            if isinstance(item, Exception):
                raise item
            yield item

    def _observe(self, prompt_index: int, output: RequestOutput, now_s: float) -> None:
        if any(c.delta_token_ids for c in output.outputs):
            last_s = self._last_token_time_s[prompt_index]
            if last_s is None:
                self._metrics.ttft_s.observe(now_s - self.arrival_time_s)
            else:
                self._metrics.itl_s.observe(now_s - last_s)
            self._last_token_time_s[prompt_index] = now_s
        if output.finished:
            self._metrics.e2e_s.observe(now_s - self.arrival_time_s)
            if output.first_scheduled_time is not None:  # both stamps are the engine's own clock
                self._metrics.queue_s.observe(max(0.0, output.first_scheduled_time - output.arrival_time))
            for choice in output.outputs:
                self._metrics.request_finished(choice.finish_reason or "abort")
            if self.trace_context is not None:
                _record_stage_spans(output, self.trace_context)


def _record_stage_spans(output: RequestOutput, parent) -> None:
    """queue: arrival -> first scheduled; prefill: -> first token; decode: -> finished (engine monotonic stamps)."""
    stamps = [output.arrival_time, output.first_scheduled_time, output.first_token_time, output.finished_time]
    to_ns = _MONOTONIC_TO_EPOCH_NS
    attributes: dict[str, str | int | float | bool] = {
        "sluicegate.engine_request_id": output.request_id,
        "sluicegate.cached_prompt_tokens": output.num_cached_tokens,
    }
    for name, start, end in zip(tracing.ENGINE_STAGES, stamps, stamps[1:]):
        if start is not None and end is not None:
            tracing.record_span("engine", name, int(start * 1e9) + to_ns, int(end * 1e9) + to_ns, parent, attributes)


class AsyncEngine:
    def __init__(
        self,
        engine,
        metrics: ServerMetrics,
        kv_hub: KVEventHub,
        max_waiting_requests: int,
        retry_after_s: int,
        on_fatal: Callable[[BaseException], None],
    ):
        self.engine = engine
        self.metrics = metrics
        self.kv_hub = kv_hub
        self.max_waiting_requests = max_waiting_requests
        self.max_num_seqs: int = engine.config.max_num_seqs
        self.retry_after_s = retry_after_s
        self.on_fatal = on_fatal
        self.dead: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        # Event-loop side.
        self._streams: dict[str, tuple[OutputStream, int]] = {}
        self._pending_futures: set[asyncio.Future] = set()
        self._num_pending_adds = 0  # requests submitted whose add the engine thread has not yet reported
        # Engine-thread side.
        self._kv_seq = 0

    # -- event-loop API ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread.start()

    async def stop(self, error: APIError | None = None, timeout_s: float = 10.0) -> None:
        """Stop the engine thread; every unfinished request (streams and adds not yet taken) fails with `error`."""
        self._commands.put(_STOP)
        await asyncio.to_thread(self._thread.join, timeout_s)
        # Whatever the drain did not finish gets an error now rather than waiting forever.
        error = error or EngineUnavailableError()
        for stream in {stream for stream, _ in self._streams.values()}:
            stream.fail(error)
        self._streams.clear()
        for future in list(self._pending_futures):
            self._resolve(future, exc=error)

    @property
    def alive(self) -> bool:
        return self.dead is None and self._thread.is_alive()

    async def add_requests(
        self,
        request_ids: list[str],
        prompts: list[list[int]],
        params: SamplingParams,
        cache_salt: str,
        arrival_time_s: float,
        kv_transfer: KVTransferRequest | None = None,
        pulled: PullPlan | None = None,
    ) -> OutputStream:
        """Admit one HTTP request's prompts. Raises OverloadedError (queue full), InvalidRequestError (more prompts
        than could ever be admitted, or the engine refused it, e.g. too long) or EngineUnavailableError. `pulled`
        (blocks read for the one prompt) is taken over: added with the request, or given back if it is refused."""
        try:
            self._check_alive()
            self._check_room(len(prompts))
            if params.structured is not None:
                await self._compile_grammar(params.structured)
        except BaseException:
            if pulled is not None:
                self.cancel_pull(pulled)
            raise
        stream = OutputStream(request_ids, arrival_time_s, self.metrics, params.n)
        for index, request_id in enumerate(request_ids):
            self._streams[request_id] = (stream, index)
        self._num_pending_adds += len(prompts)
        future = self._new_future()
        self._commands.put(_AddGroup(request_ids, prompts, params, cache_salt, future, kv_transfer, pulled))
        try:
            await future
        except RequestError as exc:
            self.metrics.request_rejected(type(exc).__name__)
            raise from_request_error(exc) from None
        finally:
            if future.cancelled() or future.exception() is not None:
                self._forget(stream)
        return stream

    def _check_room(self, num_prompts: int) -> None:
        # Counted in engine requests (one per prompt). Free batch seats take queued requests at the next step, so
        # only what is beyond them really waits: at most max_num_seqs + max_waiting_requests are ever queued.
        max_admissible = self.max_num_seqs + self.max_waiting_requests
        if num_prompts > max_admissible:
            # Not a 503: even an idle replica could never take it, so a retry would fail the same way.
            self.metrics.request_rejected("too_many_prompts")
            raise InvalidRequestError(
                f"{num_prompts} prompts can never be admitted: this replica takes at most {max_admissible} at once "
                f"(max_num_seqs {self.max_num_seqs} + max_waiting_requests {self.max_waiting_requests}).",
                param="prompt",
            )
        num_queued, num_free_seats = self._queue_state()
        if num_queued + num_prompts - num_free_seats > self.max_waiting_requests:
            self.metrics.request_rejected("queue_full")
            raise OverloadedError(
                f"The waiting queue is full ({num_queued} queued for {num_free_seats} free batch seats, waiting "
                f"limit {self.max_waiting_requests}); retry later.",
                self.retry_after_s,
            )

    async def _compile_grammar(self, spec: GrammarSpec) -> None:
        """Wait here, not in the engine thread, for the request's grammar (compiled in a worker thread, or cached):
        other requests keep decoding meanwhile, and a bad schema is this request's 400."""
        try:
            # Shielded: a client that leaves must not cancel the compile that the cache hands to the next one.
            await asyncio.shield(asyncio.wrap_future(self.engine.grammars.submit(spec)))
        except RequestError as exc:
            self.metrics.request_rejected(type(exc).__name__)
            # The cached failure may have come from a request that named the grammar with another field.
            raise InvalidRequestError(str(exc), param=spec.param) from None

    def abort(self, stream: OutputStream) -> None:
        """Stop a stream's unfinished requests (client gone); their blocks are freed before the next step."""
        num_aborted = self._forget(stream)
        if num_aborted and self.alive:
            self.metrics.aborted.inc()
            for _ in range(num_aborted * stream.num_choices):  # as vLLM counts them: finished, reason "abort"
                self.metrics.request_finished("abort")

    async def plan_pull(self, prompt: list[int], cache_salt: str, remote: RemotePrefill) -> PullPlan | PullRefusal:
        """Local blocks to read a prefill replica's KV into (engine/kv_transfer/pull_plan.py); the caller hands the
        plan to add_requests or to cancel_pull."""
        self._check_alive()
        future = self._new_future()
        self._commands.put(_PlanPull(prompt, cache_salt, remote, future))
        try:
            return await future
        except asyncio.CancelledError:
            # Cancelled after the plan arrived but before this resumed: nobody else will give its blocks back.
            if future.done() and not future.cancelled() and future.exception() is None:
                plan = future.result()
                if isinstance(plan, PullPlan):
                    self.cancel_pull(plan)
            raise

    def cancel_pull(self, plan: PullPlan) -> None:
        if self.alive:
            self._commands.put(_CancelPull(plan))

    def handoffs_read(self, request_ids: list[str]) -> None:
        """Prefill side, called periodically: free what decode replicas have read (and what expired)."""
        if self.alive:
            self._commands.put(_Handoffs(request_ids))

    async def kv_snapshot(self) -> Snapshot:
        self._check_alive()
        future = self._new_future()
        self._commands.put(_TakeSnapshot(future))
        return await future

    # -- event-loop internals ---------------------------------------------------------------------------------------

    def _queue_state(self) -> tuple[int, int]:
        """(requests not yet in the batch, free batch seats) as of the latest step."""
        stats = self.metrics.stats
        if stats is None:
            return self._num_pending_adds, self.max_num_seqs
        # Everything already waiting (new or preempted) and swapped out takes free seats before a new request does.
        num_queued = stats.num_waiting + stats.num_swapped + self._num_pending_adds
        return num_queued, max(0, self.max_num_seqs - stats.num_running)

    def _check_alive(self) -> None:
        if not self.alive:
            raise EngineUnavailableError()

    def _new_future(self) -> asyncio.Future:
        assert self._loop is not None  # start() set it
        future = self._loop.create_future()
        self._pending_futures.add(future)
        future.add_done_callback(self._pending_futures.discard)
        return future

    def _forget(self, stream: OutputStream) -> int:
        """Drop a stream's live requests from the routing table and abort them in the engine; how many there were."""
        live = [rid for rid in stream.request_ids if rid in self._streams]
        for rid in live:
            del self._streams[rid]
        if live:
            self._commands.put(_Abort(live))
        return len(live)

    def _deliver(self, outputs: list[RequestOutput], events: list[SequencedEvent], stats, num_added: int) -> None:
        now_s = time.monotonic()
        self._num_pending_adds -= num_added
        self.metrics.stats = stats
        if events:
            self.kv_hub.publish(events)
        for output in outputs:
            entry = self._streams.get(output.request_id)
            if entry is None:
                continue  # aborted while this step ran
            stream, prompt_index = entry
            if output.finished:
                del self._streams[output.request_id]
            stream.put(prompt_index, output, now_s)

    def _resolve(self, future: asyncio.Future, result=None, exc: BaseException | None = None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def _resolve_plan(self, future: asyncio.Future, plan: PullPlan | PullRefusal) -> None:
        if future.done():  # the waiting handler was cancelled (its client left): nobody takes the blocks
            if isinstance(plan, PullPlan):
                self.cancel_pull(plan)
            return
        future.set_result(plan)

    def _deliver_snapshot(self, events: list[SequencedEvent], snapshot: Snapshot, future: asyncio.Future) -> None:
        if events:
            self.kv_hub.publish(events)
        self._resolve(future, snapshot)

    def _die(self, exc: BaseException) -> None:
        logger.critical("engine loop crashed; failing all requests and exiting", exc_info=exc)
        self.dead = exc
        error = EngineUnavailableError()
        for stream in {stream for stream, _ in self._streams.values()}:
            stream.fail(error)
        self._streams.clear()
        for future in list(self._pending_futures):
            self._resolve(future, exc=error)
        self.kv_hub.close()
        self.on_fatal(exc)

    def _call_loop(self, callback, *args) -> None:
        assert self._loop is not None  # start() set it before the engine thread runs
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass  # the loop is closed: the server is already gone

    # -- engine thread ----------------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                num_added = 0
                for command in self._take_commands(block=not self.engine.has_unfinished_requests()):
                    if command is _STOP:
                        return
                    num_added += self._apply(command)
                steps_before = self.engine.counters.num_steps_total
                outputs = self.engine.step() if self.engine.has_unfinished_requests() else []
                if not outputs and not num_added and self.engine.counters.num_steps_total == steps_before:
                    time.sleep(IDLE_BACKOFF_S)  # work exists but nothing could run: do not spin the loop
                # stats() is updated in place by later steps: hand the loop a copy.
                stats = copy.copy(self.engine.stats())
                self._call_loop(self._deliver, outputs, self._take_events(), stats, num_added)
        except BaseException as exc:  # noqa: BLE001 - any failure of the loop is fatal for the replica
            self._call_loop(self._die, exc)

    def _take_commands(self, block: bool) -> list:
        commands = [self._commands.get()] if block else []
        while True:
            try:
                commands.append(self._commands.get_nowait())
            except queue.Empty:
                return commands

    def _apply(self, command) -> int:
        if isinstance(command, _AddGroup):
            return self._add_group(command)
        if isinstance(command, _Abort):
            for request_id in command.request_ids:
                self.engine.abort_request(request_id)
        elif isinstance(command, _PlanPull):
            plan = self.engine.plan_kv_pull(command.prompt, command.cache_salt, command.remote)
            self._call_loop(self._resolve_plan, command.future, plan)
        elif isinstance(command, _CancelPull):
            self.engine.cancel_kv_pull(command.plan)
        elif isinstance(command, _Handoffs):
            self.engine.release_handoffs(command.read_request_ids)
            self.engine.expire_handoffs()
        elif isinstance(command, _TakeSnapshot):
            events = self._take_events()
            snapshot = Snapshot(self._kv_seq, list(self.engine.cached_block_hashes()))
            self._call_loop(self._deliver_snapshot, events, snapshot, command.future)
        return 0

    def _add_group(self, group: _AddGroup) -> int:
        added = []
        try:
            for request_id, prompt in zip(group.request_ids, group.prompts, strict=True):
                pulled, group.pulled = group.pulled, None  # the first prompt's; add_request takes it over
                self.engine.add_request(
                    request_id, prompt, group.params, group.cache_salt, kv_transfer=group.kv_transfer, pulled=pulled
                )
                added.append(request_id)
        except Exception as exc:  # noqa: BLE001
            # A RequestError is the client's; anything else is a bug on an input nobody foresaw. add_request
            # registers a request only as its last act, so either way the engine is intact: fail this request,
            # not the replica (a crafted input must not take the replica down).
            if not isinstance(exc, RequestError):
                logger.exception("add_request failed unexpectedly for %s", group.request_ids)
                exc = InternalServerError(f"The engine could not take this request ({type(exc).__name__}).")
            for request_id in added:
                self.engine.abort_request(request_id)
            self._call_loop(self._resolve, group.future, None, exc)
        else:
            self._call_loop(self._resolve, group.future, None, None)
        return len(group.request_ids)

    def _take_events(self) -> list[SequencedEvent]:
        events = []
        for event in self.engine.take_kv_events():
            self._kv_seq += 1
            events.append(SequencedEvent(self._kv_seq, event.kind, list(event.block_hashes)))
        return events
