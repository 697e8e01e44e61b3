"""The gateway imports without torch (docs/architecture.md): checked in a fresh interpreter, including the tokenizer
loading path, which reads tokenizer.json with the tokenizers library and renders chat templates with jinja2."""

from __future__ import annotations

import subprocess
import sys

MODULES = [
    "gateway.app",
    "gateway.cli",
    "gateway.admin.cli",
    "gateway.request.proxy",
    "gateway.store.redis_store",
    "gateway.store.resilient",
    "gateway.simple_router",
    "gateway.request.tokenizer",
]


def test_gateway_imports_and_loads_tokenizers_without_torch(tokenizer_dir):
    code = (
        "import sys\n"
        f"for name in {MODULES!r}:\n"
        "    __import__(name)\n"
        "from gateway.request.tokenizer import PromptTokenizer\n"
        f"tok = PromptTokenizer({tokenizer_dir!r})\n"
        "assert tok.count('hello world') > 0\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
