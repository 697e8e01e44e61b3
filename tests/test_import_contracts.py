"""The layering between the packages (docs/architecture.md, "Layout and packaging"), checked on the source.

Every import statement counts wherever it sits (module level, inside a function, under `if TYPE_CHECKING`), in
both forms (`import x`, `from x import y`) and relative (`from ..engine import y` resolves to `engine`), so a
contract cannot be dodged by moving an import into a function. The runtime check that the gateway starts without
torch is tests/gateway/test_torch_free.py; this one also covers modules that test never loads.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_OURS = frozenset({"bench", "engine", "gateway", "guardrails", "kernels", "sluicegate"})

# package -> top-level names it must never import, and why.
_CONTRACTS: dict[str, frozenset[str]] = {
    # The gateway runs on hosts without torch (its image installs the base dependencies only).
    "gateway": frozenset({"torch", "triton", "transformers", "engine", "kernels"}),
    # Kernels are leaf code: a kernel and its reference are testable without the engine or a server.
    "kernels": _OURS - {"kernels"},
    # Guardrails are a library the gateway calls through RequestHooks; they never reach back into it.
    "guardrails": frozenset({"gateway"}),
    # A replica stands alone: it never needs the gateway's code to serve.
    "engine": frozenset({"gateway", "guardrails"}),
    # Shared by both sides, so torch-free and below both of them.
    "sluicegate": frozenset({"torch", "triton", "engine", "kernels"}),
}

# Breaches that predate this test, as "module -> imported", each to be removed with the fix (the test fails when
# one no longer occurs, so the list only shrinks). None today: the gateway never imports transformers (its tokenizer
# reads tokenizer.json and tokenizer_config.json itself).
_KNOWN_VIOLATIONS: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str  # absolute dotted name
    line: int

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported}"


def _module_name(path: Path, root: Path = _ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve_relative(importer_package: str, level: int, module: str | None) -> str:
    base = importer_package.split(".")
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join(base + ([module] if module else []))


@cache
def _modules(package: str) -> dict[str, Path]:
    return {_module_name(path): path for path in sorted((_ROOT / package).rglob("*.py"))}


def _imports(path: Path, root: Path = _ROOT) -> Iterator[Import]:
    importer = _module_name(path, root)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(package, node.level, node.module)
                # `from . import x` may name a submodule: count it as `package.x`.
                for alias in node.names:
                    submodule = ".".join(part for part in (base, alias.name) if part)
                    yield Import(importer, submodule if node.module is None else base, node.lineno)
            else:
                yield Import(importer, node.module or "", node.lineno)


def _violations(package: str) -> list[Import]:
    forbidden = _CONTRACTS[package]
    return [
        found
        for path in _modules(package).values()
        for found in _imports(path)
        if found.imported.split(".")[0] in forbidden
    ]


def test_contracts_hold_apart_from_known_breaches():
    found = {str(v): v for package in _CONTRACTS for v in _violations(package)}
    new = sorted(f"{found[key]} (line {found[key].line})" for key in found.keys() - _KNOWN_VIOLATIONS)
    assert not new, "imports across a package boundary (see _CONTRACTS):\n" + "\n".join(new)
    fixed = sorted(_KNOWN_VIOLATIONS - found.keys())
    assert not fixed, f"fixed, so remove from _KNOWN_VIOLATIONS: {fixed}"


def test_the_scanner_sees_known_imports():
    # A renamed folder or a parse slip must not make the contracts pass vacuously.
    def imported_roots(package: str) -> set[str]:
        return {i.imported.split(".")[0] for path in _modules(package).values() for i in _imports(path)}

    assert {"torch", "kernels", "sluicegate"} <= imported_roots("engine")
    assert {"starlette", "guardrails", "sluicegate"} <= imported_roots("gateway")
    assert {"torch", "triton"} <= imported_roots("kernels")


def test_relative_imports_resolve(tmp_path):
    module = tmp_path / "gateway" / "request" / "fake.py"
    module.parent.mkdir(parents=True)
    module.write_text("from . import tokenizer\nfrom ..routing import router\nfrom ... import engine\n")
    found = [i.imported for i in _imports(module, root=tmp_path)]
    assert found == ["gateway.request.tokenizer", "gateway.routing", "engine"]
