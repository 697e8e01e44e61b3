"""Fixtures for the replica server tests: one shared live server per module on the tiny model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import openai
import pytest
import torch

from tests.engine.server.live import LiveServer, make_engine

# A Llama-3.1-style template that renders `tools` and the history's `tool_calls` (arguments decoded into objects):
# the tiny model's own template renders neither.
TOOLS_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools is not none %}<|start_header_id|>system<|end_header_id|>\n\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}<|eot_id|>{% endif %}"
    "{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message.tool_calls %}{% for call in message.tool_calls %}"
    '{"name": "{{ call.function.name }}", "parameters": {{ call.function.arguments | tojson }}}'
    "{% endfor %}{% else %}{{ message['content'] | trim }}{% endif %}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    # The tiny model's matmuls are microseconds of work; on a shared 2-core box torch's thread pool makes each
    # step ~10x slower through contention.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def live_server(tiny_model_dir) -> LiveServer:
    server = LiveServer(make_engine(tiny_model_dir)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(live_server) -> openai.OpenAI:
    """The official openai client on the module's server (a module may override `live_server`)."""
    with openai.OpenAI(base_url=live_server.url + "/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


@pytest.fixture(scope="session")
def tools_model_dir(tiny_model_dir, tmp_path_factory) -> str:
    """The tiny model with TOOLS_TEMPLATE as its chat template (made once: tests only read it)."""
    folder = tmp_path_factory.mktemp("tiny-tools") / "model"
    shutil.copytree(tiny_model_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    Path(folder / "chat_template.jinja").write_text(TOOLS_TEMPLATE)
    return str(folder)
