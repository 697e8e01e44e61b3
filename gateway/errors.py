"""Errors at the HTTP edge, always in OpenAI's error format (docs/architecture.md, "Errors at the HTTP edge").

ApiError                      any error a client sees: status, message, type, code, param, extra headers
  made by the helpers below:  invalid_request (400), unauthorized (401), model_not_allowed (403),
                              unknown_model (404), context_length_exceeded (400), unavailable (503),
                              upstream_failed (502), upstream_timeout (504), guardrail_policy_unknown (503)
  429s (rate_limit_exceeded, insufficient_quota) come from rejections.py
upstream_retry_after_s        an upstream's Retry-After header, read defensively
"""

from __future__ import annotations

import email.utils
import json
import math
from datetime import UTC, datetime

UPSTREAM_RETRY_AFTER_MAX_S = 300.0
"""An upstream asking for a longer wait is passed on as this: past minutes, a client should rather try again."""


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": error}).encode()


def invalid_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", code, param)


def unauthorized(message: str = "Incorrect API key provided.") -> ApiError:
    return ApiError(401, message, "invalid_request_error", "invalid_api_key")


def model_not_allowed(model: str) -> ApiError:
    return ApiError(
        403, f"This API key may not use model {model!r}.", "invalid_request_error", "model_not_allowed", "model"
    )


def unknown_model(model: str) -> ApiError:
    return ApiError(404, f"The model {model!r} does not exist.", "invalid_request_error", "model_not_found", "model")


def context_length_exceeded(
    prompt_tokens: int, max_tokens: int, max_model_len: int, param: str, at_least: bool = False
) -> ApiError:
    """`at_least`: prompt_tokens is a lower bound (the prompt was too long to be worth counting exactly).
    max_tokens 0: an embedding, which has an input and no completion."""
    bound = "at least " if at_least else ""
    message = f"This model's maximum context length is {max_model_len} tokens. However, you requested {bound}"
    if max_tokens:
        message += f"{prompt_tokens + max_tokens} tokens ({bound}{prompt_tokens} in the prompt, {max_tokens} for the completion)."
    else:
        message += f"{prompt_tokens} tokens in the input."
    return ApiError(400, message, "invalid_request_error", "context_length_exceeded", param)


def unavailable(message: str, retry_after_s: float = 1.0) -> ApiError:
    return ApiError(503, message, "service_unavailable", "service_unavailable", headers=retry_after(retry_after_s))


def guardrail_policy_unknown(policy: str) -> ApiError:
    # 503 without Retry-After: the gateway's config, not the client, must change (no point retrying soon).
    return ApiError(
        503,
        f"The tenant's guardrail policy {policy!r} is not defined on this gateway; an administrator "
        "must set the tenant's `guardrails` to a defined policy or 'off'.",
        "service_unavailable",
        "guardrail_policy_unknown",
    )


def upstream_failed(message: str) -> ApiError:
    return ApiError(502, message, "upstream_error", "upstream_error")


def upstream_timeout(message: str) -> ApiError:
    return ApiError(504, message, "upstream_error", "upstream_timeout")


def retry_after(retry_after_s: float) -> dict[str, str]:
    # Retry-After is whole seconds; round up so a client that obeys it is admitted.
    return {"retry-after": str(max(1, int(-(-retry_after_s // 1))))}


def upstream_retry_after_s(value: str | None, default_s: float = 1.0) -> float:
    """An upstream's Retry-After in seconds, clamped to [1, UPSTREAM_RETRY_AFTER_MAX_S]; default_s when absent or
    unreadable. RFC 9110 allows delay-seconds or an HTTP date; a date in the past means "now" (clamped to 1 s)."""
    if not value:
        return default_s
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return default_s
        if when.tzinfo is None:  # "-0000" parses naive; HTTP dates are UTC
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if not math.isfinite(seconds):  # "nan", "inf", "1e400": garbage, not a wait
        return default_s
    return min(max(seconds, 1.0), UPSTREAM_RETRY_AFTER_MAX_S)
