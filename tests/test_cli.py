"""The `sluicegate` command's own flags (each subcommand's tests live beside its package's)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from sluicegate import cli

_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_version_is_pyprojects(capsys):
    with _PYPROJECT.open("rb") as f:
        expected = tomllib.load(f)["project"]["version"]
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"sluicegate {expected}\n"


def test_version_from_the_command_line():
    # A fresh interpreter, as a user runs it: no subcommand module (and so no torch) is imported for --version.
    code = (
        "import json, sys; from sluicegate.cli import main; main(['--version']); print(json.dumps(list(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    version_line, modules_line = result.stdout.splitlines()
    assert version_line.startswith("sluicegate ")
    top_level = {name.split(".")[0] for name in json.loads(modules_line)}
    assert not top_level & {"torch", "gateway", "engine", "bench"}


def test_unknown_command_is_a_usage_error(capsys):
    assert cli.main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err


def test_every_subcommand_names_a_module_that_exists():
    # The table names modules as strings (imported lazily), so a moved module would otherwise fail only when run.
    missing = [module for module, _ in cli.SUBCOMMANDS.values() if importlib.util.find_spec(module) is None]
    assert not missing
