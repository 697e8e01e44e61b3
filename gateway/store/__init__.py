"""Where tenants, keys, buckets and usage live: Redis (shared by every gateway) or in-process (one gateway).

Both implement `Store` (base.py) with the same semantics; `resilient.py` puts the fail-open / fail-closed policy
in front of Redis.
"""
