"""`sluicegate engine` settings: flags from the config dataclasses, YAML sections, and errors that exit 2."""

from __future__ import annotations

from pathlib import Path

from engine.server import cli

EXAMPLE_YAML = Path(__file__).resolve().parents[3] / "config" / "engine.yaml"


def _configs(argv: list[str]):
    return cli.build_configs(cli._parser().parse_args(argv))


def test_flags_map_to_both_configs():
    engine, server = _configs(
        ["--model", "/m", "--max-num-seqs", "4", "--no-enable-prefix-caching", "--port", "9000",
         "--max-waiting-requests", "3", "--drain-timeout-s", "2.5", "--kv-cache-memory", "1024"]
    )  # fmt: skip
    assert (engine.model, engine.max_num_seqs, engine.enable_prefix_caching) == ("/m", 4, False)
    assert engine.kv_cache_memory_bytes == 1024  # the engine's error message names --kv-cache-memory
    assert (server.port, server.max_waiting_requests, server.drain_timeout_s) == (9000, 3, 2.5)


def test_role_is_a_second_name_for_kv_role():
    assert _configs(["--model", "/m", "--role", "prefill"])[0].kv_role == "prefill"
    assert _configs(["--model", "/m", "--kv-role", "decode"])[0].kv_role == "decode"


def test_yaml_then_flags_override(tmp_path):
    path = tmp_path / "engine.yaml"
    path.write_text("engine:\n  model: /a\n  max_num_seqs: 8\nserver:\n  port: 8200\n")
    engine, server = _configs(["--config", str(path), "--max-num-seqs", "2"])
    assert (engine.model, engine.max_num_seqs, server.port) == ("/a", 2, 8200)


def test_example_config_is_valid():
    engine, server = _configs(["--config", str(EXAMPLE_YAML), "--model", "/m"])
    assert engine.block_size == 16 and server.port == 8100


def test_bad_settings_exit_2(tmp_path, capsys):
    assert cli.main(["--model", "/m", "--block-size", "12"]) == 2
    assert "block_size=12" in capsys.readouterr().err
    assert cli.main(["--max-num-seqs", "4"]) == 2
    assert "--model" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("engines: {}\n")
    assert cli.main(["--config", str(tmp_path / "bad.yaml"), "--model", "/m"]) == 2
    assert cli.main(["--model", "/m", "--max-waiting-requests", "0"]) == 2
    # a YAML syntax error and a model folder that is not there: one line naming the problem, not a traceback
    (tmp_path / "broken.yaml").write_text("engine: [\n")
    capsys.readouterr()
    assert cli.main(["--config", str(tmp_path / "broken.yaml"), "--model", "/m"]) == 2
    assert "broken.yaml is not valid YAML" in capsys.readouterr().err
    assert cli.main(["--model", str(tmp_path / "no-such-model")]) == 2
    assert "no-such-model" in capsys.readouterr().err
    assert cli.main(["--model", "/m", "--host", "999.1.1.1"]) == 2
    assert "host='999.1.1.1'" in capsys.readouterr().err
    assert cli.main(["--model", "/m", "--kv-transfer-host", "decode 0"]) == 2
    assert "kv_transfer_host='decode 0'" in capsys.readouterr().err
