#!/usr/bin/env bash
# One short GPU slot: kernel checks, kernel timings vs measured copy bandwidth, the engine at Llama-3-8B shape.
# Prints one table; JSON goes to $OUT (or ./bench_gpu_out/). Extra arguments go to bench/gpu/run.py
# (--cpu-smoke: tiny shapes under TRITON_INTERPRET=1, no GPU needed).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ -f .venv/bin/activate ]; then . .venv/bin/activate; fi
for arg in "$@"; do
  if [ "$arg" = "--cpu-smoke" ]; then export TRITON_INTERPRET=1; fi
done
# run.py keeps its own 460 s budget; this outer limit only catches a hang it cannot interrupt.
exec timeout -k 5 475 python -m bench.gpu.run "$@"
