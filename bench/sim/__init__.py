"""A cluster simulator whose replicas behave like our engine, for `sluicegate bench routing`.

profiles.py   step-time models (our engine on this CPU, Llama-3-8B on an H100)
kv.py         one replica's KV blocks: running requests and the prefix cache share them
replica.py    one replica: continuous batching, token budget, chunked prefill, preemption
cluster.py    arrivals, routing through a policy, per-request results
bounds.py     hit-rate bounds at a cluster cache size: unbounded, pooled LRU, pooled OPT (Belady)
stats.py      percentiles and confidence intervals over replays
"""
