"""The `sluicegate` console script: one subcommand per entry point, imported lazily.

Lazy imports keep `sluicegate admin ...` and `sluicegate gateway` free of torch, and each subcommand's module owns
its own argument parsing (`main(argv) -> int`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "up": ("sluicegate.up", "start the local stack: a gateway and two engine replicas on a tiny model"),
    "gateway": ("gateway.cli", "run the gateway (OpenAI endpoint, tenants, limits, routing)"),
    "engine": ("engine.server.cli", "run one engine replica (OpenAI-compatible server)"),
    "admin": ("gateway.admin.cli", "administer tenants, keys, limits and usage through the admin API"),
    "make-tiny-model": ("engine.tiny_model", "write a small random-weight Llama model and tokenizer to a folder"),
    "bench": ("bench.cli", "benchmarks: engine, serve, gateway, routing, guardrails, disagg, console"),
    "capacity": ("sluicegate.capacity", "KV-cache capacity planner for a model on a GPU"),
}


def _usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = ["usage: sluicegate [--version] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] == "--version":
        # The installed distribution's version (pyproject.toml), so it cannot drift from what pip reports.
        print(f"sluicegate {importlib.metadata.version('sluicegate')}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"sluicegate: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
