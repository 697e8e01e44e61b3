"""Fit the simulator's step-time model to our engine on this machine: `python -m bench.sim.fit_cpu`.

Times single engine steps of known composition on the tiny model (built offline in a temp folder): prefill-only
steps of one prompt (64-2000 tokens) and decode-only steps of B sequences of context L. A least-squares fit of
step_s = fixed + prefill_token * P + decode_row * B + context_token * B * L + prefill_pair * P^2 gives the constants
of `profiles.CPU_TINY` (the medians of 5 repeats per point; the machine is shared, so medians, not means).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")  # as the tests and the engine on this 2-core machine run

PREFILL_TOKENS = (64, 256, 512, 1024, 2000)
DECODE_POINTS = ((1, 32), (8, 32), (32, 32), (8, 512), (32, 256))  # (rows, context tokens per row)
REPEATS = 5


def _time_step(engine) -> float:
    started = time.perf_counter()
    engine.step()
    return time.perf_counter() - started


def measure(model_dir: str) -> list[tuple[int, int, int, float]]:
    """(prefill tokens, decode rows, decode context tokens, median step seconds) per point."""
    from engine import LLM, SamplingParams

    llm = LLM(model_dir, max_num_seqs=64, max_model_len=2048 + 64, enable_prefix_caching=False)
    engine = llm.engine
    vocab = engine.spec.vocab_size
    rng = np.random.default_rng(0)
    ids = iter(range(10**9))
    points = []
    for prompt in PREFILL_TOKENS:
        times = []
        for _ in range(REPEATS):
            request_id = f"p{next(ids)}"
            engine.add_request(request_id, rng.integers(5, vocab, size=prompt).tolist(), SamplingParams(max_tokens=1))
            times.append(_time_step(engine))
            while engine.has_unfinished_requests():
                engine.step()
        points.append((prompt, 0, 0, statistics.median(times)))
    for rows, context in DECODE_POINTS:
        params = SamplingParams(temperature=0.0, max_tokens=REPEATS + 4, ignore_eos=True)
        for _ in range(rows):
            engine.add_request(f"d{next(ids)}", rng.integers(5, vocab, size=context).tolist(), params)
        while engine.scheduler.waiting or any(s.is_prefilling for s in engine.scheduler.running):
            engine.step()
        times = [_time_step(engine) for _ in range(REPEATS)]
        while engine.has_unfinished_requests():
            engine.step()
        points.append((0, rows, rows * context, statistics.median(times)))
    return points


def fit(points: list[tuple[int, int, int, float]]) -> tuple[float, ...]:
    """(fixed_s, prefill_token_s, decode_row_s, context_token_s, prefill_pair_s): non-negative least squares on
    relative error (step times span 100x; a cost below zero would be noise, not physics)."""
    from scipy.optimize import nnls

    design = np.array([[1.0, p, b, c, p * p] for p, b, c, _ in points])
    seconds = np.array([s for *_, s in points])
    coefficients, _ = nnls(design / seconds[:, None], np.ones_like(seconds))
    return tuple(float(x) for x in coefficients)


def main() -> None:
    from engine.tiny_model import make_tiny_model

    with tempfile.TemporaryDirectory() as folder:
        model_dir = str(make_tiny_model(folder, preset="tiny", arch="llama"))
        points = measure(model_dir)
    for prefill_tokens, rows, context_tokens, seconds in points:
        print(
            f"prefill {prefill_tokens:5d}  rows {rows:3d}  context {context_tokens:6d}  step {seconds * 1000:8.2f} ms"
        )
    fixed, prefill, row, context, pair = fit(points)
    print(
        f"fixed_s={fixed:.3e}, prefill_token_s={prefill:.3e}, decode_row_s={row:.3e}, "
        f"context_token_s={context:.3e}, prefill_pair_s={pair:.3e}"
    )


if __name__ == "__main__":
    main()
