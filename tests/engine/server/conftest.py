"""Fixtures for the replica server tests: one shared live server per module on the tiny model."""

from __future__ import annotations

import openai
import pytest
import torch

from tests.engine.server.live import LiveServer, make_engine


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
