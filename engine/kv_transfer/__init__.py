"""KV transfer between replicas for disaggregated prefill and decode (docs/architecture.md, "Disaggregated prefill
and decode"): the request field (params.py), what a prefill holds (handoffs.py), where a decode reads into
(planner.py, pull_plan.py), and the transfer itself behind an interface (connector.py) on NIXL (nixl_connector.py)."""
