"""`sluicegate bench engine --profile-step`: where a decode step's time goes, at batch sizes 1, 8 and 64.

Each batch size runs that many requests (random prompts of PROMPT_TOKENS tokens, greedy, EOS ignored) on one engine;
after they are all prefilled and a few warm-up steps, the engine's step clock (engine/step_profile.py) times each
phase of `num_steps` decode steps of exactly that batch; the table shows each phase's median over those steps
(the mean is mostly the steps that lost their core, on a shared machine), "total" the median step:

  schedule  the scheduler (and drafting, with speculative decoding on)
  prepare   the model runner's inputs: token ids, positions, slot mapping, block tables, the host-to-device copy
  forward   the model's forward pass and the logits of the sampled rows
  sample    computed-token bookkeeping, sampling rows, the sampler
  output    appending tokens (detokenizing, stop checks), finished sequences, the RequestOutputs

With async_output_processing (on by default on CUDA) a step first appends the tokens of the step before, billed to
schedule, and detokenizes them after its own sample, billed to output.
"""

from __future__ import annotations

import time

import numpy as np

from engine.step_profile import PHASES

BATCH_SIZES = (1, 8, 64)
PROMPT_TOKENS = 32
WARMUP_STEPS = 4


def profile_steps(
    model_dir: str,
    num_steps: int,
    batch_sizes=BATCH_SIZES,
    timer: str = "wall",
    compiled: bool = False,
    **engine_kwargs,
):
    """One row per batch size: median ms per step of each phase. timer "cpu": the engine thread's CPU time.
    compiled: the model's forward under torch.compile (inductor, dynamic shapes; the paged attention's Python breaks
    the graph around it), to measure whether compiling pays on this machine; the engine itself runs eager."""
    from engine import LLM, SamplingParams

    llm = LLM(model_dir, max_num_seqs=max(64, *batch_sizes), **engine_kwargs)
    engine = llm.engine
    if compiled:
        import torch

        model = engine.runner.model
        model.forward = torch.compile(model.forward, dynamic=True)
    engine.clock.timer = time.thread_time if timer == "cpu" else time.perf_counter
    vocab = engine.spec.vocab_size
    rng = np.random.default_rng(0)
    rows = []
    for batch in batch_sizes:
        # Enough tokens that no request finishes inside the measured steps: the batch stays `batch` throughout.
        params = SamplingParams(temperature=0.0, max_tokens=WARMUP_STEPS + num_steps + 2, ignore_eos=True)
        prompts = [rng.integers(5, vocab, size=PROMPT_TOKENS).tolist() for _ in range(batch)]
        decode_steps(engine, f"b{batch}", prompts, params, num_steps)
        per_step_ms = engine.clock.median_ms()
        totals_s = [sum(phase_s) for phase_s in zip(*engine.clock.steps_s.values())]
        total_ms = float(np.median(totals_s)) * 1000
        outside_ms = float(np.median([t - f for t, f in zip(totals_s, engine.clock.steps_s["forward"])])) * 1000
        rows.append({"batch": batch, "steps": engine.clock.num_steps, **{f"{p}_ms": per_step_ms[p] for p in PHASES},
                     "total_ms": total_ms, "outside_forward_ms": outside_ms})  # fmt: skip
    return rows


def decode_steps(engine, prefix: str, prompts: list[list[int]], params, num_steps: int) -> dict[str, list[float]]:
    """`prompts` prefilled and warmed up, then `num_steps` decode steps of exactly that batch on the engine's step
    clock (each phase's seconds in each step); the requests are aborted after. Raises if one finished inside the
    measured steps (the batch was not constant)."""
    ids = [f"{prefix}-{i}" for i in range(len(prompts))]
    for request_id, prompt in zip(ids, prompts):
        engine.add_request(request_id, prompt, params)
    while engine.scheduler.waiting or any(s.is_prefilling for s in engine.scheduler.running):
        engine.step()
    for _ in range(WARMUP_STEPS):
        engine.step()
    engine.clock.reset()
    engine.clock.enabled = True
    for _ in range(num_steps):
        engine.step()
    engine.clock.enabled = False
    if len(engine.scheduler.running) != len(prompts):
        raise RuntimeError(f"{prefix}: a request finished inside the measured steps; the batch was not constant")
    for request_id in ids:
        engine.abort_request(request_id)
    return engine.clock.steps_s


def print_profile_table(rows: list[dict], meta: dict) -> None:
    busy = ", with a busy neighbour process" if meta.get("busy_neighbour") else ""
    policy = f", OMP_WAIT_POLICY={meta['omp_wait_policy']}" if meta.get("omp_wait_policy") else ""
    compiled = ", forward under torch.compile" if meta.get("compiled") else ""
    print(f"bench engine --profile-step: {meta['timer']} ms per decode step (medians), model {meta['model']},"
          f" {meta['threads']} torch threads, {meta['cpu_count']} CPUs{busy}{policy}{compiled}")  # fmt: skip
    header = f"{'batch':>5} " + " ".join(f"{p:>9}" for p in PHASES) + f" {'total':>9} {'not fwd':>9}"
    print(header)
    for r in rows:
        cells = " ".join(f"{r[f'{p}_ms']:>9.3f}" for p in PHASES)
        print(f"{r['batch']:>5} {cells} {r['total_ms']:>9.3f} {r['outside_forward_ms']:>9.3f}")
