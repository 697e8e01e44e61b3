"""Routing a disaggregated model by stage (gateway/routing/model_router.py, STAGE_TIERS; policies/decode_load.py):
which replicas each stage may take, tier by tier, what the decode hop weighs, and that a pool without prefill
replicas routes as it always did. The router is not started: replicas are healthy until probed."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import CollectorRegistry

from gateway.routing import NoHealthyReplicaError, RouteRequest, build_router
from gateway.routing.base import OK, Role, Stage
from gateway.routing.policies import Candidate, DecodeLoadPolicy, PolicyRequest, ReplicaLoad
from gateway.routing.router import PrefixRouter
from sluicegate.block_hash import block_hashes

TOKENS = [(7 * i) % 300 for i in range(64)]


def request(stage: Stage, tokens: list[int] = TOKENS, max_tokens: int = 8) -> RouteRequest:
    return RouteRequest("m", tokens, "", max_tokens, block_hashes=block_hashes(tokens), stage=stage)


def router(roles: dict[str, str], registry: CollectorRegistry | None = None, policy: str = "round_robin"):
    replicas = [{"name": n, "url": f"http://{n}:1", "role": r, "kv_events": False} for n, r in roles.items()]
    return build_router({"m": {"replicas": replicas, "routing": {"policy": policy}}}, metrics_registry=registry)


def names(router: PrefixRouter, stage: Stage, exclude: frozenset[str] = frozenset(), times: int = 6) -> set[str]:
    """The replicas `times` requests of `stage` went to (new prompts each: no prefix hit draws them together)."""
    chosen = set()
    for i in range(times):
        route = router.route(request(stage, [(i * 31 + t) % 300 for t in range(64)]), exclude)
        router.release(route, OK)
        chosen.add(route.replica)
    return chosen


SPLIT = {"p0": "prefill", "p1": "prefill", "d0": "decode", "d1": "decode", "b0": "both"}


def test_each_stage_takes_its_own_pool_first():
    split = router(SPLIT)
    assert split.disaggregated("m") and not split.disaggregated("other")
    assert names(split, Stage.PREFILL) == {"p0", "p1"}
    assert names(split, Stage.DECODE) == {"d0", "d1"}
    assert names(split, Stage.WHOLE) == {"b0"}
    route = split.route(request(Stage.DECODE))
    assert route.role == Role.DECODE and route.policy == "decode_load"
    split.release(route, OK)
    assert split.route(request(Stage.PREFILL)).policy == "round_robin"  # the model's policy


def test_a_stage_without_a_routable_replica_falls_to_the_next_tier():
    split = router(SPLIT)
    assert names(split, Stage.DECODE, frozenset({"d0", "d1"})) == {"b0"}
    assert names(split, Stage.DECODE, frozenset({"d0", "d1", "b0"})) == {"p0", "p1"}
    assert names(split, Stage.WHOLE, frozenset({"b0"})) == {"d0", "d1"}
    assert names(split, Stage.WHOLE, frozenset({"b0", "d0", "d1"})) == {"p0", "p1"}
    split.drain_replica("m", "b0")
    assert names(split, Stage.WHOLE) == {"d0", "d1"}
    with pytest.raises(NoHealthyReplicaError):
        split.route(request(Stage.PREFILL), frozenset({"p0", "p1"}))  # no fallback for a prefill hop


def test_a_prefill_hop_without_a_replica_is_no_refusal():
    registry = CollectorRegistry()
    split = router({"p0": "prefill", "d0": "decode"}, registry)
    for stage in (Stage.PREFILL, Stage.DECODE):
        with pytest.raises(NoHealthyReplicaError):
            split.route(request(stage), frozenset({"p0", "d0"}))
    assert registry.get_sample_value("sluicegate_routing_no_healthy_replica_total", {"model": "m"}) == 1


def test_a_pool_without_prefill_replicas_ignores_stages_and_roles():
    plain = router({"d0": "decode", "b0": "both"})
    assert not plain.disaggregated("m")
    for stage in Stage:
        assert names(plain, stage) == {"d0", "b0"}
    assert plain.route(request(Stage.DECODE)).policy == "round_robin"


def test_prefill_replicas_added_and_removed_at_run_time_split_and_join_the_model():
    plain = router({"d0": "decode"})
    plain.add_replica("m", "p0", "http://p0:1", kv_events=False, role=Role.PREFILL)
    assert plain.disaggregated("m") and names(plain, Stage.PREFILL) == {"p0"}
    route = plain.route(request(Stage.PREFILL))
    plain.remove_replica("m", "p0")
    assert plain.disaggregated("m")  # it leaves once its last request is released
    plain.release(route, OK)
    assert not plain.disaggregated("m")


def test_a_prefill_hop_is_released_like_any_request():
    split = router({"p0": "prefill", "d0": "decode"})
    hop = dataclasses.replace(request(Stage.PREFILL), max_tokens=1)
    route = split.route(hop)
    info = {r.name: r for r in split.replicas("m")}["p0"]
    assert (info.inflight_requests, info.role) == (1, Role.PREFILL)
    split.release(route, OK)
    assert {r.name: r for r in split.replicas("m")}["p0"].inflight_requests == 0


def test_the_decode_hop_weighs_load_free_kv_and_its_own_prefix_hits():
    split = router({"p0": "prefill", "d0": "decode", "d1": "decode"})
    held = split.route(request(Stage.DECODE, max_tokens=512))  # a long generation in flight on one of them
    other = split.route(request(Stage.DECODE, [1] * 64))
    assert other.replica != held.replica  # the idle one
    split.release(held, OK)
    split.release(other, OK)


def candidates(**loads: ReplicaLoad) -> list[Candidate]:
    return [Candidate(name, load) for name, load in loads.items()]


def test_decode_load_policy():
    policy = DecodeLoadPolicy(waiting_request_tokens=512, kv_usage_tokens=2048)
    req = PolicyRequest(prompt_tokens=256, max_tokens=64, block_size=16)
    busy, idle = ReplicaLoad(inflight_requests=1, inflight_decode_tokens=400), ReplicaLoad()
    assert policy.choose(req, candidates(busy=busy, idle=idle)).index == 1
    # free KV from the probes: a replica near full loses to one with a little more in flight
    full, roomy = ReplicaLoad(kv_usage=0.9), ReplicaLoad(inflight_requests=1, inflight_decode_tokens=300)
    assert policy.choose(req, candidates(full=full, roomy=roomy)).index == 1
    queued = ReplicaLoad(waiting_requests=2)
    assert policy.choose(req, candidates(queued=queued, roomy=roomy)).index == 1
    # a prefix it holds is KV it neither pulls nor allocates: it outweighs a little load
    warm = Candidate("warm", ReplicaLoad(inflight_requests=1, inflight_decode_tokens=100), matched_blocks=16)
    choice = policy.choose(req, [Candidate("cold", ReplicaLoad()), warm])
    assert (choice.index, choice.reason, choice.saved_tokens) == (1, "prefix", 256)
    # ties rotate
    picks = {policy.choose(req, candidates(a=ReplicaLoad(), b=ReplicaLoad())).index for _ in range(4)}
    assert picks == {0, 1}


def test_a_decode_hop_queues_no_prefill_for_the_tokens_handed_over():
    split = router({"p0": "prefill", "d0": "decode", "b0": "both"}, policy="expected_ttft")
    load = {name: split._models["m"].replicas[name].load for name in ("d0", "b0")}
    handed = dataclasses.replace(request(Stage.DECODE), handed_over_tokens=48)
    route = split.route(handed)
    # d0 reads 48 of the 64 prompt tokens and computes the last 16; it holds the KV of all 64
    assert route.replica == "d0"
    assert (load["d0"].queued_prefill_tokens, load["d0"].inflight_prompt_tokens) == (16, 64)
    split.first_token(route)
    assert load["d0"].queued_prefill_tokens == 0
    split.release(route, OK)
    assert (load["d0"].queued_prefill_tokens, load["d0"].inflight_prompt_tokens) == (0, 0)
    # the decode tier gone, the hop falls to a `both` replica, which gets no handoff: it computes the whole prompt
    route = split.route(handed, frozenset({"d0"}))
    assert route.replica == "b0"
    assert (load["b0"].queued_prefill_tokens, load["b0"].inflight_prompt_tokens) == (64, 64)
    split.release(route, OK)
    assert load["b0"].queued_prefill_tokens == 0
