"""The prepared H200 benchmark: `bench/gpu/run.sh` (kernel checks, kernel timings, engine at Llama-3-8B shape)."""
