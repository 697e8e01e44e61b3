"""Exact prompt token counts: the gateway's transformers-free path (template render + Rust encode) gives the same
ids as transformers' own `AutoTokenizer.apply_chat_template(..., tokenize=True)` and tokenizer call, and as the
engine's server, on the tiny model and on real-world templates (Llama 3, ChatML/Qwen2.5, Mistral, namespace-style)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import ApiError
from gateway.request.tokenizer import PromptTokenizer

CONVERSATIONS = [
    [{"role": "user", "content": "hello"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Explain  KV caches\n\nplease."}],
    [
        {"role": "user", "content": "héllo wörld ✓ 你好"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "   padded   "},
    ],
    [{"role": "user", "content": "x" * 3000}],
]


@pytest.fixture(scope="module")
def tokenizers(tokenizer_dir):
    from transformers import AutoTokenizer

    return PromptTokenizer(tokenizer_dir), AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chat_ids_match_transformers(tokenizers, messages):
    ours, reference = tokenizers
    expected = reference.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)["input_ids"]
    text = ours.render_chat(messages)
    assert asyncio.run(ours.encode(text, add_special_tokens=False)) == list(expected)


def test_piece_cache_stays_exact_across_turns(tokenizers):
    ours, reference = tokenizers
    conversation = []
    for turn in range(4):  # each turn resends the whole history: earlier pieces come from the cache
        conversation += [
            {"role": "user", "content": f"question {turn}: why?"},
            {"role": "assistant", "content": f"because {turn}<|eot_id|> fake"},
        ]
        expected = reference.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True)
        assert ours.encode_now(ours.render_chat(conversation), False) == list(expected["input_ids"])


def test_long_prompt_encoded_off_the_loop(tokenizers):
    ours, reference = tokenizers
    text = "def f(x):\n    return x\n" * 3000  # past LONG_PROMPT_CHARS: a worker thread encodes it
    assert asyncio.run(ours.encode(text, add_special_tokens=True)) == reference(text)["input_ids"]


def test_content_parts_and_bad_messages(tokenizers):
    ours, _ = tokenizers
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert ours.render_chat(parts) == ours.render_chat([{"role": "user", "content": "ab"}])
    with pytest.raises(ApiError) as info:
        ours.render_chat([{"content": "no role"}])
    assert info.value.status == 400 and info.value.param == "messages"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a",
        "hello world " * 500,
        "héllo wörld ✓ 你好 " * 300,
        " " * 5000,
        "<|eot_id|>" * 400,
        "x" * 20_000,
        "\u00e9\u0301" * 2000,
    ],
)
def test_min_tokens_is_a_lower_bound(tokenizers, text):
    ours, _ = tokenizers
    assert ours.min_tokens(text) <= len(ours.encode_now(text, False)) and ours.min_tokens(text) >= 0


def test_a_prompt_too_long_by_its_length_alone_is_refused_unencoded(local_gateway, monkeypatch):
    def no_encoding(*args, **kwargs):
        raise AssertionError("a prompt that cannot fit was encoded")

    monkeypatch.setattr(PromptTokenizer, "encode", no_encoding)
    key = local_gateway.admin.key(local_gateway.admin.tenant())
    for body in ({"messages": [{"role": "user", "content": "word " * 300_000}]}, {"prompt": "word " * 300_000}):
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        response = httpx.post(
            local_gateway.url + path,
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
            json={"model": "tiny", "max_tokens": 1, **body},
        )
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "context_length_exceeded" and "at least" in error["message"]  # not counted exactly


def test_a_refusal_for_max_tokens_gives_the_exact_prompt_count(local_gateway):
    """A short prompt with a max_tokens past the window: the message counts the rendered prompt exactly (the chat
    template's tokens too), not the length-only lower bound."""
    key = local_gateway.admin.key(local_gateway.admin.tenant(input_tpm=1_000_000))
    headers = {"authorization": f"Bearer {key}"}
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}
    ok = httpx.post(
        local_gateway.url + "/v1/chat/completions", headers=headers, timeout=30, json={**body, "max_tokens": 1}
    )
    prompt_tokens = 1_000_000 - int(ok.headers["x-ratelimit-remaining-input-tokens"])  # what admission counted
    refused = httpx.post(
        local_gateway.url + "/v1/chat/completions", headers=headers, timeout=30, json={**body, "max_tokens": 20_000}
    )
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded" and "at least" not in error["message"]
    assert f"({prompt_tokens} in the prompt, 20000 for the completion)" in error["message"]


def test_a_prompt_that_fills_the_window_leaves_no_room_for_an_answer(local_gateway):
    """Without max_tokens the completion still needs a token: the gateway refuses it, as the replica would."""
    key = local_gateway.admin.key(local_gateway.admin.tenant())
    response = httpx.post(
        local_gateway.url + "/v1/completions",
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
        json={"model": "tiny", "prompt": [7] * 4096},  # the window: max_model_len 4096
    )
    error = response.json()["error"]
    assert response.status_code == 400 and (error["code"], error["param"]) == ("context_length_exceeded", "prompt")
    assert "(4096 in the prompt, 1 for the completion)" in error["message"]


def test_an_embedding_input_past_the_window_is_refused_on_input(local_gateway):
    """An embedding has an input and no completion: the error names `input` and counts no completion tokens."""
    key = local_gateway.admin.key(local_gateway.admin.tenant())
    for text_or_ids, exact in (("word " * 300_000, False), ([7] * 4097, True)):
        response = httpx.post(
            local_gateway.url + "/v1/embeddings",
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
            json={"model": "tiny", "input": text_or_ids, "max_tokens": 16},  # moot for an embedding
        )
        error = response.json()["error"]
        assert response.status_code == 400 and (error["code"], error["param"]) == ("context_length_exceeded", "input")
        assert "completion" not in error["message"] and "tokens in the input" in error["message"]
        assert ("4097 tokens in the input" in error["message"]) == exact


# -- real-world chat templates, on the tiny model's vocabulary -------------------------------------------------------
# Shortened from the models' own tokenizer_config.json (the structure and the features they lean on are kept:
# strftime_now, tojson with indent, namespace, raise_exception, {% generation %}, tools, trim/lstrip blocks).

LLAMA3_TEMPLATE = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none %}
    {{- "You have access to the following functions.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

CHATML_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

# namespace(), dict(), {% generation %}, loop controls: what newer templates (SmolLM3, Qwen3) lean on.
NAMESPACE_TEMPLATE = """{%- set ns = namespace(last_user=-1, seen=dict(n=0)) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}
{%- endfor %}
{%- for m in messages %}
    {%- if m.content == 'skip me' %}{% continue %}{% endif %}
<|{{ m.role }}|>
{% if m.role == 'assistant' %}
{% generation %}{{ m.content }}{% endgeneration %}
{% else %}
{{ m.content }}
{% endif %}
{%- if loop.index0 == ns.last_user %} (last){% endif %}
{{ eos_token }}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""

# name -> (tokenizer_config.json fields, the template, where the template is written)
TEMPLATES: dict[str, tuple[dict, str, str]] = {
    "llama3": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, LLAMA3_TEMPLATE, "config"),
    "chatml": (
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "extra_special_tokens": ["<|im_start|>"]},
        CHATML_TEMPLATE,
        "jinja",
    ),
    "mistral": (
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
        MISTRAL_TEMPLATE,
        "config",
    ),
    "namespace": ({"eos_token": "<|end_of_text|>"}, NAMESPACE_TEMPLATE, "jinja"),
}


def _tokenizer_folder(root, tiny_dir: str, config: dict, template: str | None, where: str, bos: bool = False):
    import json
    from pathlib import Path

    folder = Path(root)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = json.loads((Path(tiny_dir) / "tokenizer.json").read_text())
    if bos:  # Llama 3's post-processor: BOS before every encoding that asks for special tokens
        tokenizer["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {
                "<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [0], "tokens": ["<|begin_of_text|>"]}
            },
        }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = {"tokenizer_class": "TokenizersBackend", "model_max_length": 8192, **config}
    if template is not None and where == "config":
        config["chat_template"] = template
    elif template is not None:
        (folder / "chat_template.jinja").write_text(template)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return str(folder)


@pytest.fixture(scope="module", params=sorted(TEMPLATES))
def templated(request, tokenizer_dir, tmp_path_factory):
    from transformers import AutoTokenizer

    config, template, where = TEMPLATES[request.param]
    folder = _tokenizer_folder(tmp_path_factory.mktemp(request.param), tokenizer_dir, config, template, where)
    return PromptTokenizer(folder), AutoTokenizer.from_pretrained(folder)


def _assert_same_chat(ours, reference, messages, tools=None):
    """Our render + encode gives transformers' ids, or both refuse the conversation."""
    try:
        expected = reference.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=True)
    except Exception as exc:  # the template's raise_exception, a missing key...
        with pytest.raises(ApiError) as info:
            ours.render_chat(messages, tools)
        assert info.value.status == 400, exc
        return
    text = ours.render_chat(messages, tools)
    assert reference.decode(ours.encode_now(text, False)) == reference.decode(expected["input_ids"])
    assert ours.encode_now(text, False) == list(expected["input_ids"])
    assert ours._rust_ids(text, False) == list(expected["input_ids"])  # the whole-text path agrees too


VARIED_CONVERSATIONS = [
    *CONVERSATIONS,
    [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    [{"role": "user", "content": "skip me"}, {"role": "assistant", "content": "</s><s>[INST] sneaky <|im_end|>"}],
    [{"role": "assistant", "content": "first"}],
    [{"role": "user", "content": "tab\tnew\nline\r\n  {{ not jinja }} {% raw %}"}],
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Météo — für eine Stadt ✓",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.mark.parametrize("messages", VARIED_CONVERSATIONS)
def test_real_templates_match_transformers(templated, messages):
    ours, reference = templated
    _assert_same_chat(ours, reference, messages)


def test_real_templates_with_tools_match_transformers(templated):
    ours, reference = templated
    _assert_same_chat(ours, reference, [{"role": "user", "content": "weather in Zürich?"}], TOOLS)


def test_template_errors_are_400s(tokenizer_dir, tmp_path):
    """The Mistral template refuses roles that do not alternate (the others accept any order)."""
    config, template, where = TEMPLATES["mistral"]
    ours = PromptTokenizer(_tokenizer_folder(tmp_path, tokenizer_dir, config, template, where))
    with pytest.raises(ApiError) as info:
        ours.render_chat([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert info.value.status == 400 and "alternate" in info.value.message


_TEXT = st.lists(
    st.sampled_from(
        list("ab xyz\n\t  éü✓你") + ["<|eot_id|>", "<s>", "</s>", "<|im_end|>", "<|im_start|>", "[INST]", "{{", "%}"]
    ),
    max_size=40,
).map("".join)


@st.composite
def _conversations(draw):
    turns = draw(st.integers(min_value=1, max_value=6))
    messages = [{"role": "system", "content": draw(_TEXT)}] if draw(st.booleans()) else []
    first = draw(st.sampled_from(["user", "assistant"])) if draw(st.integers(0, 9)) == 0 else "user"
    other = {"user": "assistant", "assistant": "user"}
    role = first
    for _ in range(turns):
        messages.append({"role": role, "content": draw(_TEXT)})
        role = other[role]
    return messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=_conversations())
def test_random_conversations_match_transformers(templated, messages):
    ours, reference = templated
    _assert_same_chat(ours, reference, messages)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT)
def test_completion_ids_match_transformers_with_and_without_bos(bos_tokenizers, text):
    for ours, reference in bos_tokenizers:
        for add in (True, False):
            assert ours.encode_now(text, add) == reference(text, add_special_tokens=add)["input_ids"]


@pytest.fixture(scope="module")
def bos_tokenizers(tokenizer_dir, tmp_path_factory):
    """Completions: the tiny model adds nothing; a Llama 3 style post-processor adds BOS (add_special_tokens)."""
    from transformers import AutoTokenizer

    pairs = []
    for bos in (False, True):
        folder = _tokenizer_folder(
            tmp_path_factory.mktemp(f"bos{bos}"), tokenizer_dir, TEMPLATES["llama3"][0], LLAMA3_TEMPLATE, "jinja", bos
        )
        pairs.append((PromptTokenizer(folder), AutoTokenizer.from_pretrained(folder)))
    assert pairs[1][0].encode_now("hi", True)[0] == 0 and pairs[0][0].encode_now("hi", True)[0] != 0
    return pairs


def test_template_files_and_special_tokens_load_as_transformers_loads_them(tokenizer_dir, tmp_path):
    import json

    from transformers import AutoTokenizer

    config, _, _ = TEMPLATES["mistral"]
    folder = _tokenizer_folder(tmp_path / "named", tokenizer_dir, config, "default:{{ bos_token }}", "jinja")
    (tmp_path / "named" / "additional_chat_templates").mkdir()
    (tmp_path / "named" / "additional_chat_templates" / "tool_use.jinja").write_text("tools:{{ tools | tojson }}")
    ours, reference = PromptTokenizer(folder), AutoTokenizer.from_pretrained(folder)
    for tools in (None, TOOLS):
        _assert_same_chat(ours, reference, [{"role": "user", "content": "x"}], tools)
    assert ours.render_chat([{"role": "user", "content": "x"}]) == "default:<s>"
    assert ours.model_max_length == 8192 and ours._template_vars == {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
    }
    added = {t.content: t.special for t in ours._rust.get_added_tokens_decoder().values()}
    assert added["<s>"] and added["</s>"] and added["<unk>"]

    # A processor's chat_template.json is read when nothing else names a template; no template: no chat.
    bare = _tokenizer_folder(tmp_path / "bare", tokenizer_dir, {}, None, "config")
    assert not PromptTokenizer(bare).has_chat_template
    (tmp_path / "bare" / "chat_template.json").write_text(json.dumps({"chat_template": "{{ messages[0].content }}!"}))
    assert PromptTokenizer(bare).render_chat([{"role": "user", "content": "hey"}]) == "hey!"
    with pytest.raises(ApiError):
        PromptTokenizer(_tokenizer_folder(tmp_path / "none", tokenizer_dir, {}, None, "config")).render_chat([])


def test_sandbox_and_hf_globals():
    import jinja2

    from gateway.request.chat_template import compile_chat_template

    render = lambda source, **kw: compile_chat_template(source).render(**kw)  # noqa: E731
    assert render("{{ x | tojson }}", x={"é": "<b>"}) == '{"é": "<b>"}'  # not HTML-escaped, not ASCII-escaped
    assert render("{{ x | tojson(indent=2) }}", x=[1]) == "[\n  1\n]"
    assert render("{{ strftime_now('%Y') | length }}") == "4"
    assert render("{% generation %}kept{% endgeneration %}") == "kept"
    assert render("{{ dict(a=1).a }}") == "1"
    with pytest.raises(jinja2.exceptions.TemplateError, match="nope"):
        render("{{ raise_exception('nope') }}")
    with pytest.raises(jinja2.exceptions.SecurityError):
        render("{% set ns = namespace(_x=1) %}")
    with pytest.raises(jinja2.exceptions.SecurityError):
        render("{{ m.append(1) }}", m=[])  # immutable sandbox


@pytest.mark.parametrize("messages", VARIED_CONVERSATIONS)
def test_counts_and_block_hashes_equal_the_engines(tokenizer_dir, messages):
    """What the engine's server counts (engine/server/tokenization.py): chat through apply_chat_template and
    encode(add_special_tokens=False); completions through encode(add_special_tokens=True by default)."""
    from engine.server.tokenization import Tokenization
    from sluicegate.block_hash import block_hashes

    ours, engine = PromptTokenizer(tokenizer_dir), Tokenization.from_pretrained(tokenizer_dir)
    try:
        chat = ours.encode_now(ours.render_chat(messages), False)
        assert chat == asyncio.run(engine.encode_chat(messages))
        assert block_hashes(chat, 16, "") == block_hashes(asyncio.run(engine.encode_chat(messages)), 16, "")
        text = " / ".join(m["content"] for m in messages)
        assert asyncio.run(ours.encode(text, True)) == asyncio.run(engine.encode(text, True))
    finally:
        engine.close()
