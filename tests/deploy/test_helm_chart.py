"""The Helm chart (deploy/helm/sluicegate), rendered by Helm's own engine (the helm-python-sdk package binds Helm's Go
SDK; nothing is downloaded) and checked three ways: every manifest against the Kubernetes JSON schemas of the oldest
and newest Kubernetes the chart supports (kubernetes-validate ships them), the rendered gateway.yaml through the
gateway's own config loader, and the engine's command line through the engine's own argument parser."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from gateway.config import config_from_dict
from gateway.routing.base import Role
from gateway.runtime import SHUTDOWN_SETTLE_TIMEOUT_S

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "sluicegate"
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.utils.latest_version())  # Chart.yaml: kubeVersion >=1.25

BASE: dict[str, Any] = {
    "adminToken": {"value": "admin-secret-for-tests"},
    "engine": {"modelVolume": {"hostPath": "/srv/models"}, "modelDir": "llama-3.1-8b-instruct"},
    "redis": {"bundled": {"enabled": True, "password": "pw-123"}},
}


def values(**overrides: Any) -> dict[str, Any]:
    """BASE with `overrides` deep-merged in ("a__b": v sets values["a"]["b"])."""
    merged = copy.deepcopy(BASE)
    for dotted, value in overrides.items():
        *path, last = dotted.split("__")
        node = merged
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return merged


class _UniqueKeyLoader(yaml.SafeLoader):
    """A repeated key is a template bug that Kubernetes resolves silently (the last wins): fail on it."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        repeated = {key for key in keys if keys.count(key) > 1}
        if repeated:
            raise yaml.constructor.ConstructorError(None, None, f"repeated keys {repeated}", node.start_mark)
        return super().construct_mapping(node, deep=deep)


def render(chart_values: dict[str, Any], namespace: str = "llm") -> list[dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(chart_values, name="sg", namespace=namespace, is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if not path.endswith(".txt"):
            docs.extend(doc for doc in yaml.load_all(text, Loader=_UniqueKeyLoader) if doc)
    return docs


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    return only


def engine_services(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engines' headless Services, one per pool, in the order the chart renders them (prefill, then decode)."""
    return [
        d
        for d in docs
        if d["kind"] == "Service" and d["metadata"]["labels"].get("app.kubernetes.io/component") == "engine"
    ]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


DISAGGREGATED = {"enabled": True, "prefill": {"replicaCount": 3}, "decode": {}}


# The part of the Prometheus Operator's ServiceMonitor CRD (monitoring.coreos.com/v1) the chart uses: CRDs are not in
# the Kubernetes schemas.
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}},
                },
                "namespaceSelector": {
                    "type": "object",
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                        },
                    },
                },
            },
        },
    },
}

SCENARIOS = {
    "dns, bundled redis": values(),
    "kubernetes discovery, external redis, service monitor": values(
        gateway__discovery={"mode": "kubernetes", "interval_s": 2},
        redis={"url": "rediss://:p%40ss@redis.example.internal:6380/2"},
        engine__modelVolume={"existingClaim": "models-ro"},
        serviceMonitor={"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        gateway__tenants=[{"id": "acme", "rpm": 600, "models": ["llama-3.1-8b-instruct"]}],
        gateway__extraModels={"ext": {"replicas": ["http://vllm.other.svc:8000"], "routing": {"kv_events": False}}},
    ),
    "srv, existing secrets, fixed replicas": values(
        adminToken={"existingSecret": "my-admin", "existingSecretKey": "token"},
        redis={"existingSecret": "my-redis", "existingSecretUrlKey": "url"},
        gateway__discovery={"mode": "srv", "interval_s": 5},
        gateway__autoscaling={"enabled": False},
        gateway__replicaCount=3,
    ),
    "disaggregated, dns": values(engine__disaggregated=DISAGGREGATED),
    "disaggregated, kubernetes discovery, service monitor": values(
        engine__disaggregated=DISAGGREGATED,
        gateway__discovery={"mode": "kubernetes", "interval_s": 2},
        serviceMonitor={"enabled": True},
    ),
    "disaggregated, srv": values(
        engine__disaggregated=DISAGGREGATED, gateway__discovery={"mode": "srv", "interval_s": 5}
    ),
    "no redis, one gateway, no engines' PDB": values(
        redis={"bundled": {"enabled": False}},
        gateway__autoscaling={"enabled": False},
        gateway__replicaCount=1,
        gateway__podDisruptionBudget={"enabled": False},
        engine__podDisruptionBudget={"enabled": False},
    ),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_manifest_is_valid_kubernetes(scenario):
    docs = render(SCENARIOS[scenario])
    assert docs
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            jsonschema.validate(doc, SERVICE_MONITOR_SCHEMA)
            continue
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)  # raises, naming the field


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_rendered_gateway_config_is_one_the_gateway_loads(scenario):
    docs = render(SCENARIOS[scenario])
    config_map = find(docs, "ConfigMap", "sg-sluicegate-gateway")
    config = config_from_dict(yaml.safe_load(config_map["data"]["gateway.yaml"]))
    deployment = find(docs, "Deployment", "sg-sluicegate-gateway")
    gateway = container(deployment)
    assert gateway["command"][:4] == ["sluicegate", "gateway", "--config", "/etc/sluicegate/gateway.yaml"]
    assert {"name": "config", "mountPath": "/etc/sluicegate", "readOnly": True} in gateway["volumeMounts"]
    assert gateway["ports"] == [{"name": "http", "containerPort": config.port, "protocol": "TCP"}]
    assert config.host == "0.0.0.0" and config.router == "gateway.routing.factory:build_router"
    # Kubernetes' SIGKILL comes after the drain and the settlements it waits for (gateway/runtime.py)
    grace_s = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace_s > config.drain_timeout_s + SHUTDOWN_SETTLE_TIMEOUT_S
    # The admin token's variable, as the config names it, comes from a Secret; so does Redis's URL when there is one.
    env = {e["name"]: e for e in gateway["env"]}
    assert env[config.admin_token_env]["valueFrom"]["secretKeyRef"]["name"]
    assert ("REDIS_URL" in env) == (scenario != "no redis, one gateway, no engines' PDB")
    served = config.models["llama-3.1-8b-instruct"]
    assert served.replicas == [] and served.discovery is not None
    # One discovery entry per engine pool, naming its headless Service, with its role.
    services = engine_services(docs)
    assert len(served.discovery_entries) == len(services) == (2 if scenario.startswith("disaggregated") else 1)
    if len(services) == 1:  # one pool: one entry, as before the list form
        assert services[0]["metadata"]["name"] == "sg-sluicegate-engine-headless"
        assert served.discovery_entries == [served.discovery]
    for entry, headless in zip(served.discovery_entries, services, strict=True):
        name = headless["metadata"]["name"]
        assert headless["spec"]["clusterIP"] == "None"
        assert entry.role == Role(headless["metadata"]["labels"].get("sluicegate/kv-role", "both"))
        engine_port = headless["spec"]["ports"][0]["port"]
        if entry.dns is not None:
            assert entry.dns == f"{name}.llm.svc.cluster.local"
            assert entry.port == engine_port
        elif entry.srv is not None:
            assert entry.srv == f"_http._tcp.{name}.llm.svc.cluster.local"
            assert headless["spec"]["ports"][0]["name"] == "http"  # the SRV record's _http
        else:
            target = entry.kubernetes
            assert target is not None and (target.service, target.namespace, target.port_name) == (name, "llm", "http")
            assert headless["spec"]["ports"][0]["name"] == "http"


def test_the_engine_command_is_what_the_engine_parses():
    from engine.server.cli import _parser, build_configs

    docs = render(values(engine__drainTimeoutSeconds=45, engine__extraArgs=["--max-num-seqs", "64"]))
    statefulset = find(docs, "StatefulSet", "sg-sluicegate-engine")
    engine = container(statefulset)
    assert engine["command"][:2] == ["sluicegate", "engine"]
    engine_config, server_config = build_configs(_parser().parse_args(engine["command"][2:]))
    assert str(engine_config.model) == "/models/llama-3.1-8b-instruct"
    assert engine_config.served_model_name == "llama-3.1-8b-instruct" and engine_config.max_num_seqs == 64
    assert server_config.host == "0.0.0.0" and server_config.drain_timeout_s == 45
    assert engine["ports"][0]["containerPort"] == server_config.port
    pod = statefulset["spec"]["template"]["spec"]
    pre_stop_s = int(engine["lifecycle"]["preStop"]["exec"]["command"][1])
    # Kubernetes must not kill a replica mid-drain: preStop, then the drain, then the engine's 5 s shutdown grace.
    assert pod["terminationGracePeriodSeconds"] > pre_stop_s + server_config.drain_timeout_s + 5
    liveness = engine["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > pre_stop_s + server_config.drain_timeout_s
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert engine[probe]["httpGet"] == {"path": "/health", "port": "http"}
    startup = engine["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800  # model loading
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in engine["volumeMounts"]
    assert statefulset["spec"]["serviceName"] == "sg-sluicegate-engine-headless"


def test_disaggregated_engines_are_a_prefill_and_a_decode_pool():
    from engine.config import EngineConfig
    from engine.server.cli import _parser, build_configs

    pools = {
        "enabled": True,
        "prefill": {"replicaCount": 3, "extraArgs": ["--max-num-batched-tokens", "8192"]},
        "decode": {"resources": {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"memory": "96Gi"}}},
    }
    chart_values = values(
        engine__replicaCount=2, engine__extraArgs=["--max-num-seqs", "64"], engine__disaggregated=pools,
        serviceMonitor={"enabled": True},
    )  # fmt: skip
    docs = render(chart_values)
    statefulsets = {
        d["metadata"]["name"]: d for d in docs if d["kind"] == "StatefulSet" and "redis" not in d["metadata"]["name"]
    }
    assert sorted(statefulsets) == ["sg-sluicegate-engine-decode", "sg-sluicegate-engine-prefill"]
    prefill, decode = statefulsets["sg-sluicegate-engine-prefill"], statefulsets["sg-sluicegate-engine-decode"]
    assert (prefill["spec"]["replicas"], decode["spec"]["replicas"]) == (3, 2)  # decode: engine.replicaCount

    prefill_engine, _ = build_configs(_parser().parse_args(container(prefill)["command"][2:]))
    decode_engine, _ = build_configs(_parser().parse_args(container(decode)["command"][2:]))
    assert (prefill_engine.kv_role, decode_engine.kv_role) == ("prefill", "decode")
    # A pool's extraArgs replace engine.extraArgs; a pool without its own takes engine's.
    default_seqs = EngineConfig.model_fields["max_num_seqs"].default
    assert (prefill_engine.max_num_batched_tokens, prefill_engine.max_num_seqs) == (8192, default_seqs)
    assert decode_engine.max_num_seqs == 64
    assert container(prefill)["resources"]["requests"] == {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1}
    assert container(decode)["resources"] == {
        "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 1},
        "limits": {"memory": "96Gi", "nvidia.com/gpu": 1},
    }

    # Each pool's StatefulSet, headless Service and PDB take its own Pods only.
    services = {d["metadata"]["name"]: d for d in engine_services(docs)}
    budgets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PodDisruptionBudget"}
    assert sorted(budgets) == ["sg-sluicegate-engine-decode", "sg-sluicegate-engine-prefill", "sg-sluicegate-gateway"]
    for own, other in ((prefill, decode), (decode, prefill)):
        own_pods, other_pods = (s["spec"]["template"]["metadata"]["labels"] for s in (own, other))
        name = own["metadata"]["name"]
        selectors = [
            own["spec"]["selector"]["matchLabels"],
            services[own["spec"]["serviceName"]]["spec"]["selector"],
            budgets[name]["spec"]["selector"]["matchLabels"],
        ]
        assert all(selects(sel, own_pods) and not selects(sel, other_pods) for sel in selectors), name
    # One ServiceMonitor for every engine still scrapes both pools.
    engine_monitor = find(docs, "ServiceMonitor", "sg-sluicegate-engine")
    assert all(
        selects(engine_monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"]) for s in services.values()
    )

    config = config_from_dict(yaml.safe_load(find(docs, "ConfigMap", "sg-sluicegate-gateway")["data"]["gateway.yaml"]))
    entries = config.models["llama-3.1-8b-instruct"].discovery_entries
    assert [(e.role, e.dns) for e in entries] == [
        (Role.PREFILL, "sg-sluicegate-engine-prefill-headless.llm.svc.cluster.local"),
        (Role.DECODE, "sg-sluicegate-engine-decode-headless.llm.svc.cluster.local"),
    ]
    with helm.Chart.load(CHART) as chart:
        notes = chart.render(chart_values, name="sg", namespace="llm", is_install=True)[
            "sluicegate/templates/NOTES.txt"
        ]
    assert "prefill: 3 (StatefulSet sg-sluicegate-engine-prefill" in notes and "decode: 2 (StatefulSet" in notes


def test_the_pools_values_change_nothing_while_disaggregation_is_off():
    off = values(engine__disaggregated={"enabled": False, "prefill": {"replicaCount": 5, "extraArgs": ["--x"]}})
    assert render(off) == render(values())
    statefulset = find(render(off), "StatefulSet", "sg-sluicegate-engine")
    assert "--kv-role" not in container(statefulset)["command"]


def test_pods_run_as_non_root_on_a_read_only_root_filesystem():
    docs = render(values())
    for workload in [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]:
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, workload["metadata"]["name"]
        security = container(workload)["securityContext"]
        assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
        assert "resources" in container(workload)
    gateway = container(find(docs, "Deployment"))
    assert (
        gateway["readinessProbe"]["httpGet"]
        == gateway["livenessProbe"]["httpGet"]
        == {"path": "/health", "port": "http"}
    )
    assert find(docs, "HorizontalPodAutoscaler")["spec"]["maxReplicas"] == 8
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "PodDisruptionBudget"} == {
        "sg-sluicegate-gateway", "sg-sluicegate-engine",
    }  # fmt: skip


def test_only_endpointslice_discovery_gets_api_access():
    dns_docs = render(values())
    assert not [d for d in dns_docs if d["kind"] in ("Role", "RoleBinding")]
    assert find(dns_docs, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    k8s_docs = render(values(gateway__discovery={"mode": "kubernetes", "interval_s": 5}))
    role = find(k8s_docs, "Role")
    assert role["rules"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}
    ]
    binding = find(k8s_docs, "RoleBinding")
    pod = find(k8s_docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def test_secrets_hold_what_the_gateway_reads():
    import base64

    docs = render(values(redis={"url": "redis://:pw@r:6379/0"}))
    secrets = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "Secret"}
    assert base64.b64decode(secrets["sg-sluicegate-admin"]["admin-token"]) == b"admin-secret-for-tests"
    assert base64.b64decode(secrets["sg-sluicegate-redis-url"]["redis-url"]) == b"redis://:pw@r:6379/0"
    existing = render(values(adminToken={"existingSecret": "mine", "existingSecretKey": "tok"}))
    assert "sg-sluicegate-admin" not in {d["metadata"]["name"] for d in existing if d["kind"] == "Secret"}
    env = {e["name"]: e for e in container(find(existing, "Deployment"))["env"]}
    assert env["SLUICEGATE_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "mine", "key": "tok"}
    # The bundled Redis: the password reaches Redis and the gateway's URL through one Secret.
    bundled = render(values())
    redis = container(find(bundled, "StatefulSet", "sg-sluicegate-redis"))
    assert "$(REDIS_PASSWORD)" in redis["args"]
    gateway_env = {e["name"]: e for e in container(find(bundled, "Deployment"))["env"]}
    assert gateway_env["REDIS_URL"]["value"] == "redis://:$(REDIS_PASSWORD)@sg-sluicegate-redis:6379/0"
    assert redis["env"][0]["valueFrom"] == gateway_env["REDIS_PASSWORD"]["valueFrom"]


def test_a_config_change_rolls_the_gateway():
    def checksum(chart_values):
        return find(render(chart_values), "Deployment")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]

    assert checksum(values()) != checksum(values(gateway__discovery={"mode": "dns", "interval_s": 9}))


@pytest.mark.parametrize(
    "chart_values, message",
    [
        (
            {k: v for k, v in BASE.items() if k != "adminToken"},
            "adminToken.value or adminToken.existingSecret is required",
        ),
        (values(engine__modelVolume={}), "engine.modelVolume.existingClaim or engine.modelVolume.hostPath is required"),
        (
            values(engine__modelVolume={"existingClaim": "a", "hostPath": "/b"}),
            "give existingClaim or hostPath, not both",
        ),
        (
            values(redis={"bundled": {"enabled": True}}),
            "redis.bundled.password or redis.bundled.existingSecret is required",
        ),
        (values(redis={"bundled": {"enabled": True, "password": "p@ss/word"}}), "URL-safe characters only"),
        (values(redis__url="redis://r:6379"), "give one of redis.url, redis.existingSecret or redis.bundled.enabled"),
        (values(redis={"bundled": {"enabled": False}}), "more than one gateway process"),
        (
            values(gateway__discovery={"mode": "consul", "interval_s": 5}),
            'must be dns, srv or kubernetes (got "consul")',
        ),
    ],
)
def test_unusable_values_stop_the_render_with_a_message(chart_values, message):
    with pytest.raises(helm.HelmError) as raised:
        render(chart_values)
    assert message in str(raised.value)


@pytest.mark.parametrize("chart_values", [values(), values(engine__disaggregated=DISAGGREGATED)])
def test_helm_lint_finds_nothing(chart_values):
    report = helm.lint(CHART, chart_values, strict=True)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
