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
- Input: every chat message's text (string content or `text` parts) and every completion prompt string is checked
  for PII; injection is scored on user and tool messages (and on completion prompts) only. Token-id prompts carry no
  text and pass unchecked. Redaction writes the redacted text back into a copy of the body.
- Output: a non-streamed body has each choice's `message.content` / `text` redacted; a stream goes through
  SseRedactor, one StreamRedactor per choice index. The held-back text of a choice goes out in the event that
  carries its `finish_reason` (or in one extra chunk before `data: [DONE]`). Output `block` ends the stream with an
  OpenAI error event; usage chunks pass through untouched, so accounting stays on the upstream's token counts.
- Blocks raise `on_block(GuardrailBlocked)`; the default raises the GuardrailBlocked itself.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from guardrails.errors import GuardrailBlocked, GuardrailConfigError, OutputBlocked
from guardrails.policy import GuardrailPolicy
from sluicegate.sse import DONE_DATA, encode_event, event_data, replace_data, split_events

if TYPE_CHECKING:
    from guardrails.engine import Guardrails
    from guardrails.stream import StreamRedactor

CHAT = "chat"
OFF = "off"
_UNTRUSTED_ROLES = frozenset({"user", "tool", "function"})


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
        slots = _text_slots(route_kind, body)
        if not slots:
            return body
        texts = [text for text, _, _ in slots]
        verdict = await asyncio.to_thread(
            self.guardrails.check_input, texts, policy, tenant.id, [scored for _, scored, _ in slots]
        )
        if verdict.blocked:
            entities = tuple(sorted(verdict.entity_counts())) if verdict.blocked_reason == "pii" else ()
            raise self.on_block(GuardrailBlocked(verdict.blocked_reason or "policy", entities))
        if verdict.action != "redact":
            return body
        redacted = copy.deepcopy(body)
        for (_, _, path), text in zip(slots, verdict.texts):
            _set_path(redacted, path, text)
        return redacted

    async def check_output(self, tenant: TenantLike, route_kind: str, response_body: bytes) -> bytes:
        policy = self.policy_for(tenant)
        if policy is None or policy.output_pii_action == "off":
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
            text = _get_path(choice, field)
            if not isinstance(text, str):
                continue
            try:
                new = await asyncio.to_thread(self.guardrails.redact_output, text, policy, tenant.id)
            except OutputBlocked as blocked:
                raise self.on_block(blocked) from None
            if new != text:
                _set_path(choice, field, new)
                changed = True
        return json.dumps(payload).encode() if changed else response_body

    def output_transformer(self, tenant: TenantLike, route_kind: str, body: dict) -> SseRedactor | None:
        policy = self.policy_for(tenant)
        if policy is None or policy.output_pii_action == "off":
            return None
        return SseRedactor(lambda: self.guardrails.stream_redactor(policy, tenant.id), route_kind)


class SseRedactor:
    """Rewrites complete SSE events (bytes in, bytes out) through one StreamRedactor per choice index."""

    def __init__(self, make_redactor: Callable[[], StreamRedactor], route_kind: str) -> None:
        self.make_redactor = make_redactor
        self.field = ("delta", "content") if route_kind == CHAT else ("text",)
        self.redactors: dict[int, StreamRedactor] = {}
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
        return replace_data(event, json.dumps(chunk).encode())

    def _choice(self, choice: dict) -> None:
        index = choice.get("index", 0)
        redactor = self.redactors.get(index)
        if redactor is None:
            redactor = self.redactors[index] = self.make_redactor()
        text = _get_path(choice, self.field)
        out = redactor.feed(text) if isinstance(text, str) else ""
        if choice.get("finish_reason") is not None:
            out += redactor.finish()
            del self.redactors[index]
        if isinstance(text, str) or out:
            _set_path(choice, self.field, out)

    def _flush_all(self) -> bytes:
        events = []
        for index, redactor in sorted(self.redactors.items()):
            tail = redactor.finish()
            if tail and self.template is not None:
                chunk = {k: v for k, v in self.template.items() if k not in ("choices", "usage")}
                choice: dict[str, Any] = {"index": index, "finish_reason": None}
                _set_path(choice, self.field, tail)
                chunk["choices"] = [choice]
                events.append(encode_event(json.dumps(chunk)))
        self.redactors.clear()
        return b"".join(events)


def _error_event(blocked: GuardrailBlocked) -> bytes:
    error = {
        "message": "The response was stopped by the tenant's output guardrail policy"
        f" ({', '.join(blocked.entities) or blocked.reason}).",
        "type": "invalid_request_error",
        "param": None,
        "code": "content_policy_violation",
    }
    return encode_event(json.dumps({"error": error}))


def _text_slots(route_kind: str, body: dict) -> list[tuple[str, bool, tuple]]:
    """(text, scored_for_injection, path into the body) for every text a request carries."""
    slots: list[tuple[str, bool, tuple]] = []
    if route_kind == CHAT:
        for i, message in enumerate(body.get("messages") or []):
            if not isinstance(message, dict):
                continue
            untrusted = message.get("role") in _UNTRUSTED_ROLES
            content = message.get("content")
            if isinstance(content, str):
                slots.append((content, untrusted, ("messages", i, "content")))
            elif isinstance(content, list):
                for j, part in enumerate(content):
                    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                        slots.append((part["text"], untrusted, ("messages", i, "content", j, "text")))
        return slots
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        slots.append((prompt, True, ("prompt",)))
    elif isinstance(prompt, list):
        slots += [(p, True, ("prompt", i)) for i, p in enumerate(prompt) if isinstance(p, str)]
    return slots


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
