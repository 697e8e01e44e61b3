"""Grammar compilation off the step loop, with an LRU of the results keyed by the canonical spec.

xgrammar compiles a grammar against the tokenizer's vocabulary (each grammar state's allowed tokens are worked out
ahead of decoding): milliseconds for a small schema, seconds for a big one. It runs in worker threads; `submit`
hands back a Future at once, which the server awaits before the request enters the engine, so a bad schema is the
client's 400 and the step loop never waits on a compile. Failures that are the schema's (GrammarError) stay cached
like results (the same bad schema again is answered at once); any other failure is dropped, so a retry recompiles.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

import xgrammar as xgr

from engine.errors import RequestError
from engine.structured.spec import GrammarKind, GrammarSpec

logger = logging.getLogger(__name__)

DEFAULT_MAX_CACHED_GRAMMARS = 256
MAX_ERROR_CHARS = 500


# xgrammar prefixes its messages with a time and its C++ source: "[00:18:51] /project/cpp/json_schema_converter.cc:5082: "
_XGRAMMAR_SOURCE = re.compile(r"^(\[[0-9:]+\] )?\S+\.(cc|h|cpp):\d+: ")


class GrammarError(RequestError):
    """The schema, regex or choice list cannot be compiled: the client's error (400)."""


class GrammarCompiler:
    """Thread-safe: the server's event loop submits, the engine thread submits and reads results."""

    def __init__(
        self,
        tokenizer,
        vocab_size: int,
        stop_token_ids: list[int] | None,  # None: the tokenizer's EOS
        max_cached_grammars: int = DEFAULT_MAX_CACHED_GRAMMARS,
        num_workers: int = 2,
    ):
        self._tokenizer = tokenizer  # the engine's HF tokenizer; read once, when the first grammar compiles
        self._vocab_size = vocab_size  # the model's (its logits' width), which may exceed the tokenizer's
        self._stop_token_ids = stop_token_ids
        self._max_cached = max_cached_grammars
        self._lock = threading.Lock()
        self._cache: OrderedDict[GrammarSpec, Future[xgr.CompiledGrammar]] = OrderedDict()
        self._pool = ThreadPoolExecutor(max_workers=num_workers, thread_name_prefix="grammar-compile")
        self._compiler: xgr.GrammarCompiler | None = None
        self._compiler_lock = threading.Lock()

    def submit(self, spec: GrammarSpec) -> Future[xgr.CompiledGrammar]:
        """The compiled grammar, as a Future: done already on a cache hit."""
        with self._lock:
            future = self._cache.get(spec)
            if future is not None:
                self._cache.move_to_end(spec)
                return future
            future = self._pool.submit(self._compile, spec)
            self._cache[spec] = future
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)  # a holder of an evicted, unfinished Future still gets its result
        future.add_done_callback(lambda done: self._drop_unless_cacheable(spec, done))
        return future

    def compile(self, spec: GrammarSpec) -> xgr.CompiledGrammar:
        """Blocking form of submit (offline use: engine.llm). Raises GrammarError."""
        return self.submit(spec).result()

    def _drop_unless_cacheable(self, spec: GrammarSpec, future: Future[xgr.CompiledGrammar]) -> None:
        if future.cancelled() or not isinstance(future.exception(), GrammarError | None):
            with self._lock:
                if self._cache.get(spec) is future:
                    del self._cache[spec]

    def _xgr_compiler(self) -> xgr.GrammarCompiler:
        with self._compiler_lock:
            if self._compiler is None:
                # Reading the vocabulary is O(vocab) Python work: paid by the first structured request, not start-up.
                info = tokenizer_info(self._tokenizer, self._vocab_size, self._stop_token_ids)
                # Our LRU is the cache (bounded, keyed by canonical text); xgrammar's own would grow unbounded.
                self._compiler = xgr.GrammarCompiler(info, max_threads=min(8, os.cpu_count() or 1), cache_enabled=False)
            return self._compiler

    def _compile(self, spec: GrammarSpec) -> xgr.CompiledGrammar:
        compiler = self._xgr_compiler()
        try:
            if spec.kind is GrammarKind.JSON_OBJECT:
                # strict_mode off: "any object" must allow properties the schema does not name (strict allows none).
                return compiler.compile_grammar(json_schema_ebnf(spec.source, strict=False))
            if spec.kind is GrammarKind.JSON_SCHEMA:
                return compiler.compile_grammar(json_schema_ebnf(spec.source, strict=True))
            if spec.kind is GrammarKind.TOOL_CALLS:
                return compiler.compile_grammar(tool_calls_ebnf(spec.source))
            if spec.kind is GrammarKind.REGEX:
                return compiler.compile_regex(spec.source)
            return compiler.compile_grammar(choice_ebnf(spec.choices))
        except Exception as exc:  # noqa: BLE001 - xgrammar reports a bad input as RuntimeError, ValueError and more
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            message = _XGRAMMAR_SOURCE.sub("", first_line)[:MAX_ERROR_CHARS]
            raise GrammarError(
                f"Invalid {spec.kind.value} for structured output: {message}", param=spec.param
            ) from None


def tokenizer_info(tokenizer, vocab_size: int, stop_token_ids: list[int] | None) -> xgr.TokenizerInfo:
    """xgrammar's view of the vocabulary, with the tokenizer's special tokens (and ids past its vocabulary) as text-less
    tokens, which no grammar can emit. xgrammar's own from_huggingface reads `<|eot_id|>` as those 10 characters of
    text, so a JSON string could hold one, and detokenizing (which drops special tokens) would change the text."""
    detected = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
    special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    encoded_vocab = [""] * vocab_size
    for token, token_id in tokenizer.get_vocab().items():
        if token_id < vocab_size and token_id not in special:
            encoded_vocab[token_id] = token
    return xgr.TokenizerInfo(
        encoded_vocab,
        detected.vocab_type,
        vocab_size=vocab_size,
        stop_token_ids=detected.stop_token_ids,
        add_prefix_space=detected.add_prefix_space,
    )


# xgrammar 0.2 writes a JSON string's characters as one of these classes (the first for a length-bounded string).
# The first lets control characters (U+0000-U+001F) through raw, which JSON forbids unescaped (json.loads rejects the
# output). Both let a surrogate (U+D800-U+DFFF) through as its 3 UTF-8-style bytes (ED A0-BF xx), which are not
# UTF-8: the detokenizer makes each byte a U+FFFD, so one character of the grammar is three of the text, and a
# string at its maxLength comes out too long (the openai client's parse() then fails the model's validation).
_LAX_STRING_CHARS = (r"[^\"\\\r\n]", r"[^\0-\x1f\"\\\r\n]")
_JSON_STRING_CHAR = r"[^\0-\x1f\"\\\r\n\uD800-\uDFFF]"
# Its \uXXXX escape (in strings without a maxLength) takes any 4 hex digits, a lone surrogate too (\ud800), which
# strict JSON parsers, pydantic's among them, reject. Kept: the other code points, and a high surrogate followed by
# a low one (a character past U+FFFF).
_LAX_ESCAPE = '("u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9])'
_JSON_ESCAPE = (
    '("u" ([0-9A-Ca-cE-Fe-f] [A-Fa-f0-9] | [Dd] [0-7]) [A-Fa-f0-9] [A-Fa-f0-9])'
    ' | ("u" [Dd] [89ABab] [A-Fa-f0-9] [A-Fa-f0-9] "\\\\u" [Dd] [C-Fc-f] [A-Fa-f0-9] [A-Fa-f0-9])'
)


def json_schema_ebnf(schema: str, strict: bool) -> str:
    """The schema's grammar as EBNF: compact JSON (one space after ':' and ','; free whitespace lets a model loop on
    it forever), keys in the schema's order, strings of valid UTF-8 and strict JSON (_json_strings)."""
    grammar = xgr.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=strict)
    return _json_strings(str(grammar))


def tool_calls_ebnf(source: str) -> str:
    """`prefix JSON suffix` (source: {"prefix", "schema", "suffix"}), the JSON as json_schema_ebnf writes it."""
    parts = json.loads(source)
    schema = xgr.Grammar.from_json_schema(json.dumps(parts["schema"]), any_whitespace=False, strict_mode=True)
    grammars = [
        xgr.Grammar.from_ebnf("root ::= " + _ebnf_literal(parts[key])) if parts[key] else None
        for key in ("prefix", "suffix")
    ]
    pieces = [g for g in (grammars[0], schema, grammars[1]) if g is not None]
    grammar = xgr.Grammar.concat(*pieces) if len(pieces) > 1 else schema
    return _json_strings(str(grammar))


def _json_strings(ebnf: str) -> str:
    """xgrammar's JSON grammar with its string characters and escapes made strict (see _LAX_STRING_CHARS)."""
    for lax in _LAX_STRING_CHARS:
        ebnf = ebnf.replace(lax, _JSON_STRING_CHAR)
    return ebnf.replace(_LAX_ESCAPE, _JSON_ESCAPE)


def choice_ebnf(choices: list[str]) -> str:
    """`root ::= "a" | "b"`: each choice a literal (EBNF string escapes are JSON's, for the characters JSON escapes)."""
    return "root ::= " + " | ".join(_ebnf_literal(c) for c in choices)


def _ebnf_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped.replace("\t", "\\t") + '"'
