"""GuardrailHooks: the gateway's RequestHooks (gateway/request/hooks.py) backed by Guardrails.

It matches that protocol structurally, so guardrails/ never imports gateway/. Wiring (the lead's side):

    hooks = GuardrailHooks(Guardrails(config), policies={"strict": GuardrailPolicy.from_dict({...})},
                           on_block=lambda blocked: invalid_request(str(blocked), code="content_policy_violation"),
                           on_unknown_policy=guardrail_policy_unknown)
    app = build_app(gateway_config, hooks=hooks)

- A tenant names its policy (`tenant.guardrails`); "off" means no checks. The admin API and the tenant seed refuse
  an unknown name through `check_policy_name`. A tenant that still names one at request time (the gateway config
  lost the policy after the tenant was written) gets `on_unknown_policy(name)` raised: the wiring makes it a 503;
  the default raises the GuardrailConfigError itself.
- Input: every string of the body that reaches the model or the upstream (request_fields.py: message contents and
  names, tool-call arguments, tool descriptions and schemas, `user`, `stop`, completion prompts and `suffix`) is
  checked for PII as the model reads it, joined and normalized (prompt_view.py); injection is scored on user and
  tool messages (and on completion prompts) only. Token-id prompts carry no text and pass unchecked. Redaction
  writes the redacted strings back into a copy of the body; PII in an identifier (a function name) blocks. A policy
  with `injection_alongside` has its injection check started by `check_alongside` instead, on the same fields, and
  the gateway holds the answer until it passes (check_input then does PII alone).
- Output: a non-streamed body has each choice's `message.content` / `text` redacted, and its `logprobs` alike
  (logprobs.py), and each tool call's `arguments`; a stream goes through SseRedactor, one StreamRedactor (and
  StreamLogprobs) per choice index, and one per streamed tool call's `arguments`. The
  held-back text of a choice (and its tokens' logprobs) goes out in the event that carries its `finish_reason` (or
  in one extra chunk before `data: [DONE]`). Output `block` ends the stream with an OpenAI error event; usage
  chunks pass through untouched, so accounting stays on the upstream's token counts.
- Blocks raise `on_block(GuardrailBlocked)`; the default raises the GuardrailBlocked itself.
- Each request a guardrail acts on counts once per action in `sluicegate_guardrail_actions_total{action}`
  (input_detect, input_redact, input_block, output_redact, output_block; GuardrailMetrics.count_request).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from guardrails.errors import GuardrailBlocked, GuardrailConfigError, OutputBlocked
from guardrails.logprobs import StreamLogprobs, redact_choice
from guardrails.policy import GuardrailPolicy
from guardrails.request_fields import CHAT, EMBEDDINGS, request_fields
from sluicegate.sse import DONE_DATA, encode_event, event_data, replace_data, split_events

if TYPE_CHECKING:
    from guardrails.engine import Guardrails
    from guardrails.prompt_view import Segment
    from guardrails.stream import StreamRedactor

OFF = "off"
# The actions a request's input checks have counted, when its injection check runs alongside (check_alongside sets
# it; the check's task inherits the request's context, and check_input runs in it).
_COUNTED: ContextVar[set[str] | None] = ContextVar("guardrail_actions_counted", default=None)


class TenantLike(Protocol):
    id: str
    guardrails: str


class GuardrailHooks:
    def __init__(
        self,
        guardrails: Guardrails,
        policies: dict[str, GuardrailPolicy],
        on_block: Callable[[GuardrailBlocked], Exception] | None = None,
        on_unknown_policy: Callable[[str], Exception] | None = None,
    ) -> None:
        if OFF in policies:
            raise GuardrailConfigError(f"policy name {OFF!r} is reserved for 'no guardrails'")
        for policy in policies.values():
            guardrails.check_policy(policy)
        self.guardrails = guardrails
        self.policies = policies
        self.on_block = on_block or (lambda blocked: blocked)
        self.on_unknown_policy = on_unknown_policy or self._undefined
        self._detecting: set[asyncio.Task[None]] = set()
        """Injection checks of `detect` policies run alongside, which nothing waits for."""

    def _undefined(self, name: str) -> GuardrailConfigError:
        return GuardrailConfigError(f"guardrail policy {name!r} is not defined; defined: {sorted(self.policies)}")

    def check_policy_name(self, name: str) -> None:
        if name != OFF and name not in self.policies:
            raise self._undefined(name)

    def policy_for(self, tenant: TenantLike) -> GuardrailPolicy | None:
        if tenant.guardrails == OFF:
            return None
        policy = self.policies.get(tenant.guardrails)
        if policy is None:
            raise self.on_unknown_policy(tenant.guardrails)
        return policy

    async def check_input(self, tenant: TenantLike, route_kind: str, body: dict) -> dict:
        policy = self.policy_for(tenant)
        if policy is None or not policy.checks_input:
            return body
        injection = not policy.injection_alongside  # else check_alongside scores it
        if not injection and policy.pii_action == "off":
            return body
        fields = request_fields(route_kind, body)
        if not fields:
            return body
        verdict = await asyncio.to_thread(
            self.guardrails.check_segments, [segment for segment, _ in fields], policy, tenant.id, injection
        )
        if verdict.action != "allow":
            self._count_once(f"input_{verdict.action}")
        if verdict.blocked:
            entities = tuple(sorted(verdict.entity_counts())) if verdict.blocked_reason == "pii" else ()
            raise self.on_block(GuardrailBlocked(verdict.blocked_reason or "policy", entities))
        if verdict.action != "redact":
            return body
        redacted = copy.deepcopy(body)
        for (segment, path), text in zip(fields, verdict.texts, strict=True):
            if text != segment.text:
                _set_path(redacted, path, text)
        return redacted

    def check_alongside(self, tenant: TenantLike, route_kind: str, body: dict) -> asyncio.Task[None] | None:
        """A policy with `injection_alongside`: its injection check, started now on the body as the client sent it
        (the fields check_input scores, before any redaction). `block`: the task to wait for, which raises `on_block`
        for an injection; `detect` can refuse nothing, so nothing waits for it (None; it is counted when done)."""
        policy = self.policy_for(tenant)
        if policy is None or policy.injection_action == "off" or not policy.injection_alongside:
            return None
        fields = request_fields(route_kind, body)
        if not fields:
            return None
        _COUNTED.set(set())  # this request's; the task below and check_input share it (one context)
        task = asyncio.get_running_loop().create_task(
            self._injection([segment for segment, _ in fields], policy, tenant.id)
        )
        if policy.injection_action == "block":
            return task
        self._detecting.add(task)  # a strong reference until it ends (the loop keeps only weak ones)
        task.add_done_callback(self._detecting.discard)
        return None

    async def _injection(self, segments: list[Segment], policy: GuardrailPolicy, tenant_id: str) -> None:
        verdict = await asyncio.to_thread(self.guardrails.check_injection, segments, policy, tenant_id)
        if verdict.action != "allow":
            self._count_once(f"input_{verdict.action}")
        if verdict.blocked:
            raise self.on_block(GuardrailBlocked(verdict.blocked_reason or "prompt_injection", ()))

    def _count_once(self, action: str) -> None:
        """A request counts once per action (sluicegate_guardrail_actions_total), also when its injection check runs
        apart, alongside (a detect by both checks: once); without that, nothing has set _COUNTED and it counts."""
        counted = _COUNTED.get()
        if counted is not None:
            if action in counted:
                return
            counted.add(action)
        self._count_request(action)

    async def check_output(self, tenant: TenantLike, route_kind: str, response_body: bytes) -> bytes:
        policy = self.policy_for(tenant)
        if policy is None or policy.output_pii_action == "off" or route_kind == EMBEDDINGS:  # vectors, no text
            return response_body
        try:
            payload = json.loads(response_body)
        except ValueError:
            return response_body
        if not isinstance(payload, dict):
            return response_body
        field = ("message", "content") if route_kind == CHAT else ("text",)
        changed = False
        for choice in payload.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            text = _get_path(choice, field)
            for arguments_path in _tool_argument_paths(choice) if route_kind == CHAT else ():
                arguments = _get_path(choice, arguments_path)
                new_arguments, _ = await self._scan_output(arguments, policy, tenant.id)
                if new_arguments != arguments:
                    _set_path(choice, arguments_path, new_arguments)
                    changed = True
            if not isinstance(text, str):
                continue
            new, findings = await self._scan_output(text, policy, tenant.id)
            if new != text:
                _set_path(choice, field, new)
                redact_choice(route_kind, choice, text, findings, policy.redaction_style)
                changed = True
        if changed:
            self._count_request("output_redact")
        return json.dumps(payload).encode() if changed else response_body

    async def _scan_output(self, text: str, policy: GuardrailPolicy, tenant_id: str) -> tuple[str, list]:
        try:
            return await asyncio.to_thread(self.guardrails.scan_output, text, policy, tenant_id)
        except OutputBlocked as blocked:
            self._count_request("output_block")
            raise self.on_block(blocked) from None

    def output_transformer(self, tenant: TenantLike, route_kind: str, body: dict) -> SseRedactor | None:
        policy = self.policy_for(tenant)
        if policy is None or policy.output_pii_action == "off":
            return None
        return SseRedactor(
            lambda: self.guardrails.stream_redactor(policy, tenant.id),
            route_kind,
            self._count_request,
            redaction_style=policy.redaction_style,
        )

    def _count_request(self, action: str) -> None:
        if self.guardrails.metrics is not None:
            self.guardrails.metrics.count_request(action)


class SseRedactor:
    """Rewrites complete SSE events (bytes in, bytes out) through one StreamRedactor per choice index; each choice's
    logprobs are held back with the text they score and redacted alike (StreamLogprobs)."""

    def __init__(
        self,
        make_redactor: Callable[[], StreamRedactor],
        route_kind: str,
        count_request: Callable[[str], None] | None = None,
        redaction_style: str = "placeholder",
    ) -> None:
        self.make_redactor = make_redactor
        self.route_kind = route_kind
        self.redaction_style = redaction_style
        self.logprobs: dict[int, StreamLogprobs] = {}
        self.count_request = count_request
        """Told `output_redact` / `output_block` once per stream, when that first happens."""
        self.counted: set[str] = set()
        self.field = ("delta", "content") if route_kind == CHAT else ("text",)
        self.redactors: dict[int, StreamRedactor] = {}
        # (choice index, tool-call index) -> the redactor of that call's streamed `arguments` (chat only)
        self.tool_redactors: dict[tuple[int, int], StreamRedactor] = {}
        self.template: dict[str, Any] | None = None  # the last chunk seen: id/model/created for an extra chunk
        self.blocked = False

    def feed(self, data: bytes) -> bytes:
        if self.blocked:
            return b""
        out = []
        for event in split_events(data):
            try:
                out.append(self._event(event))
            except OutputBlocked as blocked:
                self.blocked = True
                out.append(_error_event(blocked))
                break
        return b"".join(out)

    def flush(self) -> bytes:
        """End of stream without `[DONE]` (the upstream failed): whatever is held back, still redacted."""
        if self.blocked:
            return b""
        try:
            return self._flush_all()
        except OutputBlocked as blocked:
            self.blocked = True
            return _error_event(blocked)

    def _event(self, event: bytes) -> bytes:
        payload = event_data(event)  # every data line: a payload split over several is still redacted
        if payload == DONE_DATA:
            return self._flush_all() + event + b"\n\n"
        try:
            chunk = json.loads(payload) if payload is not None else None
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict) or not chunk.get("choices"):
            if isinstance(chunk, dict) and chunk.get("usage") is not None:  # usage comes last: text held back first
                return self._flush_all() + event + b"\n\n"
            return event + b"\n\n"
        self.template = chunk
        for choice in chunk["choices"]:
            if isinstance(choice, dict):
                self._choice(choice)
        if all(isinstance(c, dict) and self._says_nothing(c) for c in chunk["choices"]) and chunk.get("usage") is None:
            return b""  # all its text is held back: an empty delta tells the client nothing
        return replace_data(event, json.dumps(chunk).encode())

    def _says_nothing(self, choice: dict) -> bool:
        """Only empty text is left in the choice: no role, tool call, finish reason or released logprobs."""
        if choice.get("finish_reason") is not None or _get_path(choice, self.field) != "":
            return False
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and any(logprobs.get(k) for k in ("content", "tokens")):
            return False
        if self.route_kind != CHAT:
            return set(choice) <= _QUIET_COMPLETION_CHOICE_KEYS
        delta = choice.get("delta")
        return isinstance(delta, dict) and set(delta) <= {"content"} and set(choice) <= _QUIET_CHAT_CHOICE_KEYS

    def _choice(self, choice: dict) -> None:
        index = choice.get("index", 0)
        redactor = self.redactors.get(index)
        if redactor is None:
            redactor = self.redactors[index] = self._watched(self.make_redactor())
        logprobs = self.logprobs.get(index)
        if logprobs is None:
            logprobs = self.logprobs[index] = StreamLogprobs(self.route_kind, self.redaction_style)
        text = _get_path(choice, self.field)
        logprobs.add(choice.get("logprobs"), text if isinstance(text, str) else "")
        out = redactor.feed(text) if isinstance(text, str) else ""
        finished = choice.get("finish_reason") is not None
        if finished:
            out += redactor.finish()
            del self.redactors[index]
        if isinstance(text, str) or out:
            _set_path(choice, self.field, out)
        if logprobs.seen:
            choice["logprobs"] = logprobs.release(redactor.released_chars, redactor.take_redactions(), finished)
        if finished:
            del self.logprobs[index]
        if self.route_kind == CHAT:
            self._tool_calls(index, choice, finished)

    def _tool_calls(self, index: int, choice: dict, finished: bool) -> None:
        """Each call's `arguments` pieces through a redactor of its own; a finishing choice carries the held-back
        ends, merged into its own deltas (a client concatenates a call's pieces by its `index`)."""
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        calls = delta.get("tool_calls")
        by_call: dict[int, dict] = {}
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
                continue
            key = (index, call.get("index", 0))
            redactor = self.tool_redactors.get(key)
            if redactor is None:
                redactor = self.tool_redactors[key] = self._watched(self.make_redactor())
            function["arguments"] = redactor.feed(function["arguments"])
            by_call[key[1]] = function
        if finished:
            for call_index, tail in self._finish_tool_calls(index):
                if call_index in by_call:
                    by_call[call_index]["arguments"] += tail
                else:
                    delta.setdefault("tool_calls", []).append(_arguments_delta(call_index, tail))

    def _watched(self, redactor: StreamRedactor) -> StreamRedactor:
        """The redactor, its findings also counted per stream (its own callback, the findings metric, still runs)."""
        if self.count_request is None:
            return redactor
        count_request, per_finding = self.count_request, redactor.on_finding

        def on_finding(entity: str, action: str) -> None:
            if per_finding is not None:
                per_finding(entity, action)
            if action in ("redact", "block") and action not in self.counted:
                self.counted.add(action)
                count_request(f"output_{action}")

        redactor.on_finding = on_finding
        return redactor

    def _finish_tool_calls(self, index: int) -> list[tuple[int, str]]:
        """The held-back ends of choice `index`'s calls, (call index, text), forgetting their redactors."""
        tails = []
        for key in sorted(k for k in self.tool_redactors if k[0] == index):
            tail = self.tool_redactors.pop(key).finish()
            if tail:
                tails.append((key[1], tail))
        return tails

    def _flush_all(self) -> bytes:
        events = []
        for index in sorted({choice for choice, _ in self.tool_redactors}):
            tails = self._finish_tool_calls(index)
            if tails and self.template:
                chunk = {k: v for k, v in self.template.items() if k not in ("choices", "usage")}
                delta = {"tool_calls": [_arguments_delta(call_index, tail) for call_index, tail in tails]}
                chunk["choices"] = [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}]
                events.append(encode_event(json.dumps(chunk)))
        for index, redactor in sorted(self.redactors.items()):
            tail = redactor.finish()
            logprobs = self.logprobs.get(index)
            released = logprobs.release(redactor.released_chars, redactor.take_redactions(), True) if logprobs else None
            if (tail or (released and any(released.get(k) for k in ("content", "tokens")))) and self.template:
                chunk = {k: v for k, v in self.template.items() if k not in ("choices", "usage")}
                choice: dict[str, Any] = {"index": index, "finish_reason": None}
                _set_path(choice, self.field, tail)
                if released is not None:
                    choice["logprobs"] = released
                chunk["choices"] = [choice]
                events.append(encode_event(json.dumps(chunk)))
        self.redactors.clear()
        self.logprobs.clear()
        return b"".join(events)


# A choice with only these keys (and empty text) says nothing a client needs.
_QUIET_CHAT_CHOICE_KEYS = frozenset({"index", "delta", "logprobs", "finish_reason", "stop_reason"})
_QUIET_COMPLETION_CHOICE_KEYS = frozenset({"index", "text", "logprobs", "finish_reason", "stop_reason"})


def _arguments_delta(call_index: int, arguments: str) -> dict:
    return {"index": call_index, "function": {"arguments": arguments}}


def _tool_argument_paths(choice: dict) -> list[tuple]:
    """Paths of a whole chat choice's tool-call `arguments` strings (the legacy `function_call` too)."""
    message = choice.get("message")
    if not isinstance(message, dict):
        return []
    paths: list[tuple] = []
    calls = message.get("tool_calls")
    for i, call in enumerate(calls if isinstance(calls, list) else []):
        if isinstance(call, dict) and isinstance(_get_path(call, ("function", "arguments")), str):
            paths.append(("message", "tool_calls", i, "function", "arguments"))
    if isinstance(_get_path(message, ("function_call", "arguments")), str):
        paths.append(("message", "function_call", "arguments"))
    return paths


def _error_event(blocked: GuardrailBlocked) -> bytes:
    error = {
        "message": "The response was stopped by the tenant's output guardrail policy"
        f" ({', '.join(blocked.entities) or blocked.reason}).",
        "type": "invalid_request_error",
        "param": None,
        "code": "content_policy_violation",
    }
    return encode_event(json.dumps({"error": error}))


def _get_path(obj: Any, path: tuple) -> Any:
    for key in path:
        if isinstance(obj, dict):
            obj = obj.get(key)
        elif isinstance(obj, list) and isinstance(key, int) and key < len(obj):
            obj = obj[key]
        else:
            return None
    return obj


def _set_path(obj: Any, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {}) if isinstance(obj, dict) else obj[key]
    obj[path[-1]] = value
