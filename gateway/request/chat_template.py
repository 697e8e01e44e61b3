"""Chat templates rendered as Hugging Face's `apply_chat_template` renders them, without transformers.

The environment matches transformers' own (utils/chat_template_utils.py, `_compile_jinja_template`): a sandbox that
cannot mutate its inputs, `trim_blocks` and `lstrip_blocks`, the `loopcontrols` extension, a `tojson` filter that
does not escape HTML and writes non-ASCII as is, the `raise_exception` and `strftime_now` globals, a `dict` and a
`namespace` that refuse underscore names, and the `{% generation %}` block (assistant-mask tracking there; here it
renders its body unchanged, which is all that matters to the text). The template files are found as
`AutoTokenizer.from_pretrained` finds them: `chat_template.jinja` and `additional_chat_templates/*.jinja` first, then
`tokenizer_config.json`'s `chat_template`, then a processor's `chat_template.json`.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import jinja2
import jinja2.nodes
import jinja2.parser
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

# The template names one folder may hold: one template, or several by name ("default", "tool_use", ...).
ChatTemplates = str | dict[str, str]


def load_chat_templates(folder: Path, tokenizer_config: dict[str, Any]) -> ChatTemplates | None:
    templates: dict[str, str] = {}
    if (folder / "chat_template.jinja").is_file():
        templates["default"] = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    extra = folder / "additional_chat_templates"
    if extra.is_dir():
        for path in sorted(extra.glob("*.jinja")):
            templates[path.name.removesuffix(".jinja")] = path.read_text(encoding="utf-8")
    if templates:
        return templates["default"] if list(templates) == ["default"] else templates
    found = _named_templates(tokenizer_config.get("chat_template"))
    if found is None and (folder / "chat_template.json").is_file():
        found = _named_templates(
            json.loads((folder / "chat_template.json").read_text(encoding="utf-8")).get("chat_template")
        )
    return found


def _named_templates(value: object) -> ChatTemplates | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # [{"name": ..., "template": ...}], as tokenizer_config.json stores several
        return {str(t["name"]): str(t["template"]) for t in value if isinstance(t, dict)}
    return None


def select_template(templates: ChatTemplates, tools: list[Any] | None) -> str:
    """The template `apply_chat_template` picks: of several, "tool_use" for a request with tools, else "default"."""
    if isinstance(templates, str):
        return templates
    if tools is not None and "tool_use" in templates:
        return templates["tool_use"]
    if "default" in templates:
        return templates["default"]
    raise ValueError(f"this model's chat templates are named {sorted(templates)} and none is 'default'")


class _Generation(Extension):
    """`{% generation %}...{% endgeneration %}` marks what the assistant wrote (for training masks): its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """`dict(...)` for templates, without the type itself (no attribute walks from it)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, keys: Any, value: Any = None) -> dict[Any, Any]:
        return dict.fromkeys(keys, value)


def _check_name(name: object) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(f"a chat template cannot set {name!r} on a namespace")


class _TemplateNamespace(Namespace):
    """jinja2's namespace, refusing underscore names (no way to CPython internals through it)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - jinja2's own trick: `namespace(self=...)` works
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _check_name(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_name(name)
        Namespace.__setitem__(self, name, value)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


def compile_chat_template(template: str) -> jinja2.Template:
    """Raises jinja2.TemplateSyntaxError for a template that does not parse."""
    return _environment().from_string(template)
