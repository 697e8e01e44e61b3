"""Replica-selection policies behind one interface (base.py); `make_policy` builds one from its config,
`make_decode_policy` the decode hop's of a disaggregated model (decode_load.py)."""

from gateway.routing.config import PolicyConfig
from gateway.routing.policies.base import (
    Candidate,
    Choice,
    Policy,
    PolicyRequest,
    ReplicaLoad,
)
from gateway.routing.policies.consistent_hash import ConsistentHashPolicy
from gateway.routing.policies.decode_load import DecodeLoadPolicy
from gateway.routing.policies.expected_ttft import ExpectedTtftPolicy
from gateway.routing.policies.least_loaded import LeastLoadedPolicy
from gateway.routing.policies.prefix_affinity import PrefixAffinityPolicy
from gateway.routing.policies.round_robin import RoundRobinPolicy
from gateway.routing.policies.sglang_cache_aware import SglangCacheAwarePolicy


def make_policy(config: PolicyConfig) -> Policy:
    if config.name == "round_robin":
        return RoundRobinPolicy()
    if config.name == "least_loaded":
        return LeastLoadedPolicy()
    if config.name == "expected_ttft":
        return ExpectedTtftPolicy(config.hit_weight)
    if config.name == "sglang_cache_aware":
        return SglangCacheAwarePolicy()
    if config.name == "consistent_hash":
        return ConsistentHashPolicy(
            config.max_load_ratio, config.hash_key_blocks, config.virtual_nodes, config.max_load_slack_requests
        )
    return PrefixAffinityPolicy(
        max_load_ratio=config.max_load_ratio,
        max_load_slack_requests=config.max_load_slack_requests,
        load_weight=config.load_weight,
        decode_token_weight=config.decode_token_weight,
        waiting_request_tokens=config.waiting_request_tokens,
        kv_usage_tokens=config.kv_usage_tokens,
    )


def make_decode_policy(config: PolicyConfig) -> Policy:
    return DecodeLoadPolicy(config.waiting_request_tokens, config.kv_usage_tokens)


__all__ = [
    "Candidate",
    "Choice",
    "ConsistentHashPolicy",
    "DecodeLoadPolicy",
    "ExpectedTtftPolicy",
    "LeastLoadedPolicy",
    "Policy",
    "PolicyRequest",
    "PrefixAffinityPolicy",
    "ReplicaLoad",
    "RoundRobinPolicy",
    "SglangCacheAwarePolicy",
    "make_decode_policy",
    "make_policy",
]
