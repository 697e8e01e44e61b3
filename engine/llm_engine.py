"""The engine's step loop: schedule -> forward -> sample -> update sequences -> outputs.

Not thread-safe: the server drives it from one thread.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import Future
from pathlib import Path

import torch
import xgrammar as xgr

from engine.attention import PagedAttention, attention_ops
from engine.block_pool import BlockPool, KVBlock
from engine.config import EngineConfig
from engine.cpu_threads import AdaptiveThreads, supported
from engine.cuda_graphs import DecodeGraphRunner
from engine.detokenizer import IncrementalDetokenizer
from engine.errors import ContextLengthError, RequestError, RequestTooLargeError
from engine.input_batch import InputBatch
from engine.kv_cache import KVCache, kv_budget_bytes, num_blocks_for_budget
from engine.kv_cache_manager import KVCacheManager
from engine.kv_transfer.handoffs import Handoffs
from engine.kv_transfer.params import KVTransferRequest, RemotePrefill
from engine.kv_transfer.planner import PullRefusal, handoff_of, plan_pull
from engine.kv_transfer.pull_plan import PullPlan
from engine.model_loader import load_hf_config, load_weights, resolve_device, resolve_dtype
from engine.model_runner import ModelRunner
from engine.models.llama import LlamaModel
from engine.models.rope import RotaryEmbedding
from engine.models.spec import ModelSpec
from engine.outputs import CompletionOutput, RequestOutput, TokenLogprob
from engine.sampler import PendingSample, Sampler, SamplingRow
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Request, Sequence, SequenceStatus
from engine.speculative import Speculator
from engine.stats import EngineStats, KVEvent
from engine.step_profile import StepClock
from engine.structured.compiler import GrammarCompiler
from engine.structured.masker import GrammarMasker

logger = logging.getLogger(__name__)


class LLMEngine:
    def __init__(self, config: EngineConfig):
        self.config = config
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        if self.device.type == "cpu" and config.cpu_threads is not None:
            torch.set_num_threads(config.cpu_threads)
        hf_config = load_hf_config(config.model)
        self.spec = ModelSpec.from_hf_config(hf_config)
        self.model_name = config.served_model_name or Path(config.model).name
        self.max_model_len = self._resolve_max_model_len(config.max_model_len)
        self.block_size = config.block_size
        self.tokenizer = _load_tokenizer(config.model)
        self.eos_token_ids = _eos_token_ids(config.model, hf_config, self.tokenizer)
        # Structured outputs: grammars compile in worker threads (the server awaits them before adding a request).
        self.grammars = GrammarCompiler(self.tokenizer, self.spec.vocab_size, sorted(self.eos_token_ids) or None)
        self.masker = GrammarMasker(self.spec.vocab_size)
        self._awaiting_grammar: list[tuple[Request, Future[xgr.CompiledGrammar]]] = []  # added before compiled

        weights = load_weights(config.model, self.spec, config.load_format, self.device, self.dtype, config.seed)
        rope = RotaryEmbedding(hf_config, self.spec.head_dim, self.max_model_len, self.device, self.dtype)
        ops = attention_ops(self.device, config.attention_backend, config.batch_invariant)
        attention = PagedAttention(ops, self.spec.head_dim**-0.5)
        model = LlamaModel(self.spec, weights, rope, attention, config.batch_invariant)
        # After the model: a CPU model times its products at load (models/linear.py) with every thread it may use.
        self.threads: AdaptiveThreads | None = None  # CPU, no cpu_threads: fewer threads beside a busy neighbour
        if self.device.type == "cpu" and config.cpu_threads is None and config.cpu_threads_adaptive and supported():
            self.threads = AdaptiveThreads(torch.get_num_threads(), torch.set_num_threads)

        num_blocks = config.num_kv_blocks or num_blocks_for_budget(
            self.spec, self.block_size, self.dtype, kv_budget_bytes(self.device, config.kv_cache_memory_bytes)
        )
        if num_blocks < 2:
            raise ValueError(
                f"the KV-cache budget holds only {num_blocks} blocks of {self.block_size} tokens "
                f"({self.spec.kv_bytes_per_token(self.dtype.itemsize)} bytes per token); raise kv_cache_memory_bytes"
            )
        num_host_blocks = 0
        if config.preemption_mode == "swap":
            num_host_blocks = num_blocks_for_budget(self.spec, self.block_size, self.dtype, config.swap_space_bytes)
        self.kv_cache = KVCache(self.spec, num_blocks, self.block_size, self.dtype, self.device, num_host_blocks)
        self.pool = BlockPool(num_blocks, config.enable_prefix_caching, config.prefix_eviction)
        self.kv = KVCacheManager(self.pool, self.kv_cache, self.block_size, num_host_blocks)
        self.counters = EngineStats(num_blocks_total=num_blocks)
        self.scheduler = Scheduler(config, self.kv, self.counters)
        # Off unless a profiler turns it on (bench engine --profile-step); on CUDA it waits for each phase's kernels.
        self.clock = StepClock(torch.cuda.synchronize if self.device.type == "cuda" else None)
        max_blocks_per_seq = -(-self.max_model_len // self.block_size)
        self.runner = ModelRunner(
            model, self.kv_cache, self.block_size, self.device, InputBatch(config.max_num_seqs, max_blocks_per_seq),
            self.clock,
        )  # fmt: skip
        if self.device.type == "cuda" and not config.enforce_eager:
            self.runner.graph_runner = DecodeGraphRunner(
                model, self.kv_cache, max_blocks_per_seq, config.cuda_graph_sizes,
                self.device, use_graphs=True,
            )  # fmt: skip
        self.sampler = Sampler(self.device, config.seed)
        self.speculator = self._build_speculator(config, num_blocks) if config.speculative_method else None
        # A step's outputs built while the next step runs (step()): where the forward runs beside the CPU, not on it,
        # and not with speculation, whose drafts are made from the newest tokens.
        self.overlap_outputs = False
        self._pending: tuple[list[Sequence], PendingSample] | None = None  # the step launched, its tokens not taken
        self.set_async_output(config.async_output_processing)
        self.requests: dict[str, Request] = {}
        # Disaggregated serving (engine/kv_transfer/): a prefill's blocks held for a decode replica to read, and a
        # decode's read blocks held until its request is scheduled and takes them as a prefix hit.
        self.handoffs = Handoffs(self.pool, config.kv_transfer_timeout_s)
        self._pull_holds: dict[str, list[KVBlock]] = {}

    def _build_speculator(self, config: EngineConfig, num_blocks: int) -> Speculator:
        assert config.speculative_method is not None  # built only when speculation is on
        draft_runner, draft_cost_ratio = None, 0.0
        if config.speculative_method == "draft":
            assert config.speculative_model is not None  # EngineConfig requires it for 'draft'
            draft_hf = load_hf_config(config.speculative_model)
            draft_spec = ModelSpec.from_hf_config(draft_hf)
            if draft_spec.vocab_size != self.spec.vocab_size:
                raise ValueError(
                    f"draft model vocab {draft_spec.vocab_size} != target vocab {self.spec.vocab_size}: the draft "
                    "must share the target's tokenizer"
                )
            weights = load_weights(config.speculative_model, draft_spec, "auto", self.device, self.dtype, config.seed)
            rope = RotaryEmbedding(draft_hf, draft_spec.head_dim, self.max_model_len, self.device, self.dtype)
            ops = attention_ops(self.device, config.attention_backend, config.batch_invariant)
            attention = PagedAttention(ops, draft_spec.head_dim**-0.5)
            mirror = KVCache(draft_spec, num_blocks, self.block_size, self.dtype, self.device)
            self.kv_cache.mirrors.append(mirror)
            draft_batch = InputBatch(config.max_num_seqs, -(-self.max_model_len // self.block_size))
            draft_model = LlamaModel(draft_spec, weights, rope, attention, config.batch_invariant)
            draft_runner = ModelRunner(draft_model, mirror, self.block_size, self.device, draft_batch, pools=False)
            draft_cost_ratio = _param_count(draft_spec) / _param_count(self.spec)
        return Speculator(
            config.speculative_method,
            config.num_speculative_tokens,
            self.kv,
            self.sampler,
            self.spec.vocab_size,
            self.max_model_len,
            config.max_num_batched_tokens,
            config.speculative_adaptive,
            draft_runner,
            draft_cost_ratio,
        )

    def _resolve_max_model_len(self, requested: int | None) -> int:
        limit = self.spec.max_position_embeddings
        if self.spec.sliding_window:
            # Attention here is full, so contexts stay within the window where full and sliding attention agree.
            limit = min(limit, self.spec.sliding_window)
        if requested is None:
            return limit
        if requested > limit:
            raise ValueError(f"max_model_len={requested} exceeds the model's limit of {limit} positions")
        return requested

    # -- requests -----------------------------------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        cache_salt: str = "",
        arrival_time: float | None = None,
        kv_transfer: KVTransferRequest | None = None,
        pulled: PullPlan | None = None,
    ) -> None:
        """`pulled`: blocks read from a prefill replica for this prompt (plan_kv_pull, then the read); the request
        takes them over whether it is added or refused."""
        try:
            self._add_request(request_id, prompt_token_ids, params, cache_salt, arrival_time, kv_transfer)
        except BaseException:
            if pulled is not None:
                self.pool.free(reversed(pulled.held))
            raise
        if pulled is not None:
            self.pool.cache_blocks(pulled.read_blocks, pulled.hashes, pulled.token_chunks)
            self._pull_holds[request_id] = pulled.held

    def _add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        cache_salt: str,
        arrival_time: float | None,
        kv_transfer: KVTransferRequest | None,
    ) -> None:
        if request_id in self.requests:
            raise RequestError(f"request id {request_id!r} is already in use", param="request_id")
        self._validate_prompt(prompt_token_ids)
        if params.n > self.config.max_num_seqs:
            raise RequestError(
                f"n={params.n} is more than this engine runs at once (max_num_seqs={self.config.max_num_seqs})",
                param="n",
            )
        if kv_transfer is not None and params.n > 1:
            raise RequestError("kv_transfer_params needs n = 1", param="n")
        if any(t >= self.spec.vocab_size for t in params.stop_token_ids):
            raise RequestError(
                f"stop_token_ids must be below the vocabulary size {self.spec.vocab_size}", param="stop_token_ids"
            )
        if any(t >= self.spec.vocab_size for t in params.logit_bias):
            raise RequestError(
                f"logit_bias token ids must be below the vocabulary size {self.spec.vocab_size}", param="logit_bias"
            )
        max_tokens = self._resolve_max_tokens(len(prompt_token_ids), params)
        stop_token_set = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_token_ids)
        request = Request(
            request_id, list(prompt_token_ids), params, cache_salt, max_tokens=max_tokens, stop_token_set=stop_token_set
        )
        if arrival_time is not None:
            request.arrival_time = arrival_time
        request.remote_decode = kv_transfer is not None and kv_transfer.remote_decode
        request.seqs.append(self._new_sequence(request, 0))
        if params.structured is not None:
            compiled = self.grammars.submit(params.structured)
            if not compiled.done():
                # Compiling in a worker thread: the request joins the queue at the first step after (_admit_compiled).
                self.requests[request_id] = request
                self._awaiting_grammar.append((request, compiled))
                return
            self._attach_grammar(request, compiled.result())  # a bad grammar raises GrammarError (a RequestError)
        self.requests[request_id] = request
        self.scheduler.add(request.seqs[0])

    def _validate_prompt(self, prompt_token_ids: list[int]) -> None:
        if not prompt_token_ids:
            raise RequestError("the prompt is empty", param="prompt")
        vocab = self.spec.vocab_size
        if min(prompt_token_ids) < 0 or max(prompt_token_ids) >= vocab:
            raise RequestError(f"prompt token ids must be in [0, {vocab})", param="prompt")
        if not self.config.enable_chunked_prefill and len(prompt_token_ids) > self.config.max_num_batched_tokens:
            raise RequestError(
                f"the prompt has {len(prompt_token_ids)} tokens, more than max_num_batched_tokens="
                f"{self.config.max_num_batched_tokens} with chunked prefill off",
                param="prompt",
            )

    def _resolve_max_tokens(self, num_prompt_tokens: int, params: SamplingParams) -> int:
        room = self.max_model_len - num_prompt_tokens
        if params.max_tokens is not None and params.max_tokens > room or room < 1:
            raise ContextLengthError(num_prompt_tokens, params.max_tokens or 1, self.max_model_len)
        max_tokens = params.max_tokens if params.max_tokens is not None else room
        # A sequence must fit in the pool on its own, or preemption would cycle forever.
        capacity_tokens = self.pool.num_blocks * self.block_size
        if num_prompt_tokens + max_tokens > capacity_tokens:
            if params.max_tokens is not None or num_prompt_tokens >= capacity_tokens:
                needed = -(-(num_prompt_tokens + max_tokens) // self.block_size)
                raise RequestTooLargeError(num_prompt_tokens + max_tokens, needed, self.pool.num_blocks)
            max_tokens = capacity_tokens - num_prompt_tokens
        return max_tokens

    def _new_sequence(self, request: Request, index: int) -> Sequence:
        params = request.params
        generator = None
        if params.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(params.seed + index)
        detok = IncrementalDetokenizer(
            self.tokenizer.backend_tokenizer, request.prompt_token_ids, params.stop, params.skip_special_tokens
        )
        seq = Sequence(request, index, list(request.prompt_token_ids), detok, generator)
        if request.grammar is not None:  # a sibling forked at the end of the prompt starts the grammar afresh
            seq.grammar = self._new_matcher(request)
        return seq

    # -- structured outputs -------------------------------------------------------------------------------------
    def _attach_grammar(self, request: Request, compiled: xgr.CompiledGrammar) -> None:
        request.grammar = compiled
        for seq in request.seqs:
            seq.grammar = self._new_matcher(request)

    def _new_matcher(self, request: Request) -> xgr.GrammarMatcher:
        assert request.grammar is not None  # called once the grammar is compiled
        # The grammar ends on one of these (its mask then allows nothing else), whatever ignore_eos says.
        stop_tokens = sorted(self.eos_token_ids | set(request.params.stop_token_ids))
        # Speculation walks drafts through it and rolls back (engine/structured/draft_masks.py): xgrammar 0.2's
        # rollback is unlimited (max_rollback_tokens is deprecated there), so no bound to set against k.
        return xgr.GrammarMatcher(request.grammar, override_stop_tokens=stop_tokens or None)

    def _admit_compiled(self) -> list[Request]:
        """Requests whose grammar has compiled join the queue. One whose compile failed finishes ("abort"): the
        server compiles before adding, so only a direct caller's bad grammar gets here, and it must not stop the loop.
        Returns those, for the step's outputs."""
        failed, still_compiling = [], []
        for request, compiled in self._awaiting_grammar:
            if request.is_finished:  # aborted while it waited
                continue
            if not compiled.done():
                still_compiling.append((request, compiled))
                continue
            try:
                self._attach_grammar(request, compiled.result())
            except Exception as exc:  # noqa: BLE001 - the grammar's failure is this request's, never the loop's
                logger.warning("request %s: its grammar did not compile: %s", request.request_id, exc)
                self._finish(request.seqs[0], "abort")
                failed.append(request)
                continue
            self.scheduler.add(request.seqs[0])
        self._awaiting_grammar = still_compiling
        return failed

    def _advance_grammar(self, seq: Sequence, token_id: int) -> bool:
        """The sequence's matcher takes its new token; False when that finished the sequence."""
        assert seq.grammar is not None  # called for constrained sequences only
        if not seq.grammar.accept_token(token_id):
            # The mask let through only tokens the grammar accepts, so this is a bug; it fails this request only.
            logger.error("request %s: token %d broke its grammar", seq.request.request_id, token_id)
            self._finish(seq, "abort")
            return False
        if seq.grammar.is_terminated():  # it accepted a stop token (only ignore_eos lets that get this far)
            self._finish(seq, "stop")
            return False
        return True

    def abort_request(self, request_id: str) -> None:
        request = self.requests.pop(request_id, None)
        if request is None:
            return
        for seq in request.seqs:
            if not seq.is_finished:
                self._finish(seq, "abort")
        self.scheduler.remove_finished()
        if self.speculator is not None:
            self.speculator.finish(request_id)
        held = self._pull_holds.pop(request_id, None)
        if held is not None:
            self.pool.free(reversed(held))

    # -- disaggregated serving (engine/kv_transfer/) ------------------------------------------------------------
    def plan_kv_pull(
        self, prompt_token_ids: list[int], cache_salt: str, remote: RemotePrefill
    ) -> PullPlan | PullRefusal:
        """Blocks to read a prefill replica's KV into (decode side), keeping the admission watermark free."""
        if self.device.type == "cuda":
            # A block freed since the last step was launched (a stop string found late, an abort) may still be
            # written by that step; the read that will fill it is not ordered after it on the stream.
            torch.cuda.current_stream(self.device).synchronize()
        return plan_pull(
            self.pool, self.block_size, prompt_token_ids, cache_salt, remote, self.scheduler.watermark_blocks
        )

    def cancel_kv_pull(self, plan: PullPlan) -> None:
        """The read failed or its request never came: the plan's blocks go back, unregistered."""
        self.pool.free(reversed(plan.held))

    def release_handoffs(self, request_ids: list[str]) -> None:
        """Decode replicas read these handoffs (prefill side): free their blocks."""
        self.counters.kv_handoffs_read_total += sum(self.handoffs.release(request_id) for request_id in request_ids)

    def expire_handoffs(self) -> None:
        if len(self.handoffs):
            self.counters.kv_handoffs_expired_total += self.handoffs.expire(time.monotonic())

    def _drop_pull_holds(self) -> None:
        """A request scheduled for the first time took its pulled blocks as a prefix hit (its own reference):
        the plan's references go."""
        for request_id in list(self._pull_holds):
            request = self.requests.get(request_id)
            if request is None or request.first_scheduled_time is not None:
                self.pool.free(reversed(self._pull_holds.pop(request_id)))

    def set_async_output(self, on: bool | None) -> None:
        """async_output_processing, set between steps (None: the default for the device). The GPU benchmark compares
        both on one engine."""
        if self._pending is not None:
            if not all(seq.is_finished for seq in self._pending[0]):
                raise RuntimeError("a step is in flight: its tokens are taken by the next step()")
            self._pending = None  # launched for sequences a stop string has ended since: nothing to take
        overlap = self.device.type == "cuda" if on is None else on
        self.overlap_outputs = overlap and self.speculator is None

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    # -- the step -----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        if self.overlap_outputs:
            return self._step_overlapped()
        started = time.monotonic()
        clock = self.clock
        clock.start_step()
        failed, sched = self._schedule()
        if sched.is_empty:
            return self._make_outputs(failed, time.monotonic()) if failed else []
        drafts = self.speculator.propose(sched.scheduled, sched.num_batched_tokens) if self.speculator else {}
        clock.lap("schedule")  # drafting (speculative decoding) included
        logits, inputs = self.runner.execute(sched.scheduled, drafts)  # laps "prepare" and "forward"
        # Speculating sequences (drafts' keys) count only verified tokens, after verification.
        self.kv.commit_scheduled(sched.scheduled, skip=drafts)
        if drafts:
            plain_logits, plain_seqs, spec_logits, spec_seqs = _split_rows(logits, inputs, drafts)
            touched = self._sample_and_append(plain_logits, plain_seqs)
            touched += self._verify_and_append(spec_logits, spec_seqs, drafts)
            touched = list({r.request_id: r for r in touched}.values())  # siblings can take both paths
        else:
            touched = self._sample_and_append(logits, inputs.sample_seqs)
        self.scheduler.remove_finished()
        return self._end_step(started, touched + failed)

    def _step_overlapped(self) -> list[RequestOutput]:
        """step() with async_output_processing: take the last step's tokens (the only wait for the device), schedule
        and launch the next step, and only then detokenize the tokens taken and build their outputs, while the device
        runs the step just launched. A stop string is therefore found a step late: the sequence's token from the
        step in flight is dropped when it arrives (stop tokens and max_tokens still end a sequence before the next
        step is scheduled)."""
        started = time.monotonic()
        clock = self.clock
        clock.start_step()
        touched, untexted = self._take_pending()
        self.scheduler.remove_finished()
        failed, sched = self._schedule()
        launched = not sched.is_empty
        if launched:
            clock.lap("schedule")
            logits, inputs = self.runner.execute(sched.scheduled)  # laps "prepare" and "forward" (launched, on CUDA)
            self.kv.commit_scheduled(sched.scheduled)
            if inputs.sample_seqs:
                row_seqs, rows, logits = self._sampling_rows(logits, inputs.sample_seqs)
                self._pending = (row_seqs, self.sampler.launch(logits, rows))
            clock.lap("sample")
        self._detokenize(untexted)
        self.scheduler.remove_finished()
        if not launched and not touched and not failed:
            return []
        return self._end_step(started, touched + failed, launched)

    def _schedule(self) -> tuple[list[Request], SchedulerOutput]:
        """Requests whose grammar failed to compile (answered with an error), and the step's schedule."""
        failed = self._admit_compiled() if self._awaiting_grammar else []
        sched = self.scheduler.schedule()
        if self._pull_holds:
            self._drop_pull_holds()
        return failed, sched

    def _end_step(self, started: float, touched: list[Request], launched: bool = True) -> list[RequestOutput]:
        """The outputs of the requests a step touched; `launched`: the call ran a step (an overlapped call may only
        hand out the last step's tokens, and is then no step of its own, for the counters and the step clock)."""
        now = time.monotonic()
        outputs = self._make_outputs(touched, now)
        if launched:
            self.counters.num_steps_total += 1
            if self.threads is not None:
                self.threads.after_step()
            self.counters.last_step_time_s = now - started
            self.clock.lap("output")
            self.clock.end_step()
        return outputs

    def _take_pending(self) -> tuple[list[Request], list[Sequence]]:
        """The tokens of the step launched last, appended (async_output_processing): the requests they touched, and
        the sequences whose new token is still to be detokenized. A sequence finished since (a stop string found
        late, an abort) drops its token."""
        if self._pending is None:
            return [], []
        seqs, pending = self._pending
        self._pending = None
        result = pending.result()
        live = [i for i, seq in enumerate(seqs) if not seq.is_finished]
        if len(live) < len(seqs):
            seqs = [seqs[i] for i in live]
            result.token_ids = [result.token_ids[i] for i in live]
            result.logprobs = [result.logprobs[i] for i in live]
        untexted = self._append_tokens(seqs, result.token_ids, result.logprobs, defer_text=True)
        return list({seq.request.request_id: seq.request for seq in seqs}.values()), untexted

    def _detokenize(self, seqs: list[Sequence]) -> None:
        """The text of each sequence's newest token, and its stop strings (_append_tokens deferred them)."""
        for seq in seqs:
            stop = seq.detokenizer.append(seq.output_ids[-1], len(seq.output_ids) >= seq.request.params.min_tokens)
            if stop is None:
                continue
            seq.stop_reason = stop
            if seq.is_finished:  # max_tokens ended it on the same token: the stop string wins, as in step()
                seq.finish_reason = "stop"
            else:
                self._finish(seq, "stop")

    def _sample_and_append(self, logits: torch.Tensor, sample_seqs: list[Sequence]) -> list[Request]:
        if not sample_seqs:
            return []
        row_seqs, rows, logits = self._sampling_rows(logits, sample_seqs)
        result = self.sampler(logits, rows)
        self.clock.lap("sample")  # with the computed-token bookkeeping before it; what follows is "output"
        self._append_tokens(row_seqs, result.token_ids, result.logprobs)
        return list({seq.request.request_id: seq.request for seq in row_seqs}.values())

    def _sampling_rows(
        self, logits: torch.Tensor, sample_seqs: list[Sequence]
    ) -> tuple[list[Sequence], list[SamplingRow], torch.Tensor]:
        """Who samples from which logits row, with what: a request finishing its prompt with n > 1 forks here (its
        siblings share the row); structured outputs' masks are applied to the logits."""
        # Every request has all its sequences (the common case): one row per sequence, in order.
        row_seqs = sample_seqs
        rows: list[SamplingRow] = []
        for seq in sample_seqs:
            row = seq.sampling_row
            if row is None or row.suppressed_token_ids:
                if not seq.request.forked:  # its first sample (a row exists only after the fork, in _fork_rows)
                    logits, row_seqs, rows = self._fork_rows(logits, sample_seqs)
                    break
                row = self._sampling_row(seq)
            rows.append(row)
        self.masker.apply(logits, [seq.grammar for seq in row_seqs])
        return row_seqs, rows, logits

    def _fork_rows(
        self, logits: torch.Tensor, sample_seqs: list[Sequence]
    ) -> tuple[torch.Tensor, list[Sequence], list[SamplingRow]]:
        """Expand rows: a request finishing its prompt with n > 1 forks here, and its siblings sample from the same
        logits row with their own randomness."""
        rows, row_seqs, row_index = [], [], []
        for i, seq in enumerate(sample_seqs):
            family = [seq]
            request = seq.request
            if not request.forked:
                family += self._fork(request)
            for member in family:
                rows.append(self._sampling_row(member))
                row_seqs.append(member)
                row_index.append(i)
        if len(row_index) != len(sample_seqs):
            logits = logits[torch.tensor(row_index, device=logits.device)]
        return logits, row_seqs, rows

    def _verify_and_append(
        self, logits: list[torch.Tensor], seqs: list[Sequence], drafts: dict[int, list[int]]
    ) -> list[Request]:
        assert self.speculator is not None  # drafts come only from it
        for seq, tokens in zip(seqs, self.speculator.verify(seqs, logits, drafts)):
            for token in tokens:
                self._append_tokens([seq], [token], [None])
                if seq.is_finished:
                    break
            if not seq.is_finished:
                # The pending token and the accepted drafts now have verified KV; the last token is the new pending
                # one. The rejected drafts' slots are freed.
                self.kv.commit(seq, len(tokens))
        return list({s.request.request_id: s.request for s in seqs}.values())

    def _fork(self, request: Request) -> list[Sequence]:
        request.forked = True
        parent = request.seqs[0]
        children = []
        for index in range(1, request.params.n):
            child = self._new_sequence(request, index)
            self.kv.fork(parent, child)
            self.scheduler.add_running(child)
            request.seqs.append(child)
            children.append(child)
        return children

    def _sampling_row(self, seq: Sequence) -> SamplingRow:
        """The sequence's row, made at its first sample and kept: only its suppressed tokens change, once."""
        params = seq.request.params
        row = seq.sampling_row
        if row is None:
            suppressed = []
            if seq.num_output_tokens < params.min_tokens:
                suppressed = list(params.stop_token_ids) + ([] if params.ignore_eos else list(self.eos_token_ids))
            outputs = seq.output_ids if params.has_penalties else []
            row = seq.sampling_row = SamplingRow(params, seq.generator, outputs, suppressed)
        elif row.suppressed_token_ids and seq.num_output_tokens >= params.min_tokens:
            row.suppressed_token_ids = []
        return row

    def _append_tokens(
        self,
        seqs: list[Sequence],
        token_ids: list[int],
        logprobs: list[TokenLogprob | None],
        defer_text: bool = False,
    ) -> list[Sequence]:
        """Each sequence takes its token (one each: distinct sequences), then its stop checks, in one loop with
        what every sequence shares hoisted out of it; the per-token work left is what only the sequence knows.
        defer_text: leave detokenizing and stop strings to _detokenize; the sequences that need it are returned."""
        untexted: list[Sequence] = []
        now = time.monotonic()
        self.counters.generation_tokens_total += len(token_ids)
        max_model_len = self.max_model_len
        for seq, token_id, logprob in zip(seqs, token_ids, logprobs):
            request = seq.request
            if request.first_token_time is None:
                request.first_token_time = now
            seq.append_token(token_id)
            if seq.logprobs is not None:
                assert logprob is not None  # the sampler fills every such row; speculation leaves them out
                seq.logprobs.append(logprob)
            # Stop tokens cannot appear under min_tokens: the sampler suppressed them (_sampling_row).
            if token_id in request.stop_token_set:
                seq.stop_reason = token_id if token_id in request.params.stop_token_ids else None
                self._finish(seq, "stop")
                continue
            if seq.grammar is not None and not self._advance_grammar(seq, token_id):
                continue
            num_out = len(seq.output_ids)
            # A prefill for a decode replica hands its blocks over when it finishes: a stop string found a step late
            # could find them preempted by then.
            if defer_text and not request.remote_decode:
                untexted.append(seq)
                stop = None
            else:
                stop = seq.detokenizer.append(token_id, num_out >= request.params.min_tokens)
            if stop is not None:
                seq.stop_reason = stop
                self._finish(seq, "stop")
            elif num_out >= request.max_tokens or len(seq.token_ids) >= max_model_len:
                self._finish(seq, "length")
        return untexted

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.finish_reason = reason
        request = seq.request
        if request.remote_decode and reason != "abort":
            # A prefill for a decode replica: its prompt's blocks stay until that replica reads them.
            request.handoff = handoff_of(seq, self.block_size)
            if request.handoff is not None:
                self.handoffs.hold(
                    request.request_id, seq.block_table[: len(request.handoff.block_ids)], time.monotonic()
                )
        self.scheduler.finish(seq)

    def _make_outputs(self, touched: list[Request], now: float) -> list[RequestOutput]:
        """One RequestOutput per touched request. It runs for every request of every step, so the outputs are built
        with positional arguments, in engine/outputs.py's field order (keywords cost twice as much)."""
        outputs = []
        choice_output = self._choice_output
        for request in touched:
            seqs = request.seqs
            if len(seqs) == 1:  # n = 1, or a request with n > 1 still on its prompt
                choices = [choice_output(seqs[0])]
                finished = seqs[0].status is SequenceStatus.FINISHED
            else:
                choices = [choice_output(seq) for seq in seqs]
                finished = request.is_finished
            if finished:
                request.finished_time = now
                del self.requests[request.request_id]
                if self.speculator is not None:
                    self.speculator.finish(request.request_id)
            outputs.append(
                RequestOutput(
                    request.request_id,
                    request.prompt_token_ids,
                    choices,
                    finished,
                    request.num_cached_tokens,
                    request.arrival_time,
                    request.first_scheduled_time,
                    request.first_token_time,
                    request.finished_time,
                    seqs[0].embedding if finished else None,  # embedding
                    request.handoff if finished else None,  # kv_handoff
                )
            )
        return outputs

    @staticmethod
    def _choice_output(seq: Sequence) -> CompletionOutput:
        output_ids = seq.output_ids
        delta_ids = output_ids[seq.num_emitted_tokens :]
        seq.num_emitted_tokens = len(output_ids)
        logprobs = seq.logprobs
        delta_logprobs = None
        if logprobs is not None:
            delta_logprobs = logprobs[seq.num_emitted_logprobs :]
            seq.num_emitted_logprobs = len(logprobs)
        detokenizer = seq.detokenizer
        text = detokenizer.text
        delta_text = detokenizer.take_delta(seq.status is SequenceStatus.FINISHED)
        # CompletionOutput's fields in order: index, text, token_ids, logprobs, delta_text, delta_token_ids,
        # delta_logprobs, finish_reason, stop_reason.
        return CompletionOutput(
            seq.index, text, output_ids, logprobs, delta_text, delta_ids, delta_logprobs, seq.finish_reason,
            seq.stop_reason,
        )  # fmt: skip

    # -- introspection for the server ---------------------------------------------------------------------------
    def stats(self) -> EngineStats:
        """Counters plus the current queue and KV-pool gauges (the object is updated in place: copy to keep)."""
        s = self.counters
        s.num_running = len(self.scheduler.running)
        s.num_waiting = len(self.scheduler.waiting)
        s.num_swapped = len(self.scheduler.swapped)
        s.num_blocks_free = self.pool.num_free_blocks
        s.kv_cache_usage = self.pool.usage
        s.kv_handoffs_held = len(self.handoffs)
        if self.speculator is not None:
            s.spec_decode = self.speculator.stats.snapshot()
        return s

    def take_kv_events(self) -> list[KVEvent]:
        return self.pool.take_events()

    def cached_block_hashes(self) -> list[int]:
        return list(self.pool.cached)

    def reset_prefix_cache(self) -> bool:
        return self.pool.reset_prefix_cache()


def _split_rows(logits: torch.Tensor, inputs, drafts: dict[int, list[int]]):
    """Separate plain sampling rows (one per sequence) from verification rows (k + 1 per speculating sequence)."""
    plain_rows, plain_seqs, spec_logits, spec_seqs = [], [], [], []
    row = 0
    for seq, num_rows in zip(inputs.sample_seqs, inputs.num_rows):
        if seq.seq_id in drafts:
            spec_logits.append(logits[row : row + num_rows])
            spec_seqs.append(seq)
        else:
            plain_rows.append(row)
            plain_seqs.append(seq)
        row += num_rows
    plain = logits[torch.tensor(plain_rows, dtype=torch.long, device=logits.device)]
    return plain, plain_seqs, spec_logits, spec_seqs


def _param_count(spec: ModelSpec) -> int:
    per_layer = spec.hidden_size * (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim
    per_layer += spec.num_heads * spec.head_dim * spec.hidden_size + 3 * spec.hidden_size * spec.intermediate_size
    return spec.num_layers * per_layer + spec.vocab_size * spec.hidden_size


def _load_tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


def _eos_token_ids(model_dir: str, hf_config, tokenizer) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(hf_config, "eos_token_id", None), tokenizer.eos_token_id):
        ids.update(source if isinstance(source, list) else [source] if source is not None else [])
    gen_config = Path(model_dir) / "generation_config.json"
    if gen_config.is_file():
        eos = json.loads(gen_config.read_text()).get("eos_token_id")
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    return ids
