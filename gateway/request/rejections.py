"""A refused admission as the OpenAI error a client expects (429 rate_limit_exceeded / insufficient_quota)."""

from __future__ import annotations

from gateway.admin.tenants import ApiKey, Tenant
from gateway.errors import ApiError, model_not_allowed, retry_after, unauthorized
from gateway.store import base
from gateway.store.base import Admission
from gateway.store.spend import micro_usd

_BUCKET_TEXT = {
    base.REQUESTS: ("requests", "requests per minute (rpm)", "rpm"),
    base.INPUT_TOKENS: ("tokens", "input tokens per minute (input_tpm)", "input_tpm"),
    base.OUTPUT_TOKENS: ("tokens", "output tokens per minute (output_tpm)", "output_tpm"),
}


def rejection(admission: Admission, model: str, prompt_tokens: int, tenant: Tenant, key: ApiKey) -> ApiError:
    reason = admission.reason
    if reason == base.UNAUTHORIZED:
        return unauthorized("This API key is unknown, revoked or expired.")
    if reason == base.MODEL_NOT_ALLOWED:
        return model_not_allowed(model)
    headers = retry_after(admission.retry_after_s)
    renews_s = headers["retry-after"]  # the message says what the header says (whole seconds, rounded up)
    if reason in (base.DAILY_BUDGET, base.MONTHLY_BUDGET):
        period = "daily" if reason == base.DAILY_BUDGET else "monthly"
        budget = tenant.daily_tokens if reason == base.DAILY_BUDGET else tenant.monthly_tokens
        need = prompt_tokens + admission.reserved_out
        if need > budget > 0:  # no Retry-After: a new day or month would refuse it too
            return ApiError(
                429,
                f"Request too large for the {period} token budget: it needs {need} tokens (the prompt and "
                f"max_tokens), the whole budget is {budget}. Send fewer tokens or a lower max_tokens.",
                "insufficient_quota",
                "insufficient_quota",
            )
        return ApiError(
            429,
            f"You exceeded your {period} token budget; it renews in {renews_s}s.",
            "insufficient_quota",
            "insufficient_quota",
            headers=headers,
        )
    if reason in (base.DAILY_BUDGET_USD, base.MONTHLY_BUDGET_USD):
        period = "daily" if reason == base.DAILY_BUDGET_USD else "monthly"
        budget_usd = tenant.daily_budget_usd if reason == base.DAILY_BUDGET_USD else tenant.monthly_budget_usd
        if admission.reserved_cost_micro_usd > micro_usd(budget_usd) > 0:
            return ApiError(
                429,
                f"Request too large for the {period} spend budget: at most {admission.reserved_cost_micro_usd / 1e6:.6f}"
                f" USD (the prompt and max_tokens at the model's price), the whole budget is {budget_usd:g} USD. "
                "Send fewer tokens or a lower max_tokens.",
                "insufficient_quota",
                "insufficient_quota",
            )
        return ApiError(
            429,
            f"You exceeded your {period} spend budget (USD); it renews in {renews_s}s.",
            "insufficient_quota",
            "insufficient_quota",
            headers=headers,
        )
    if reason == base.CONCURRENCY:
        return ApiError(
            429,
            "Too many concurrent requests for this tenant; retry when one finishes.",
            "requests",
            "rate_limit_exceeded",
            headers=headers,
        )
    bucket = reason.removesuffix(base.TOO_LARGE)
    type_, text, limit_name = _BUCKET_TEXT[bucket]
    view = admission.buckets.get(bucket)
    limit = view.limit if view else "?"
    # The tighter of the tenant's and the key's: say so when it is the key's, which the tenant's record does not show.
    limit_text = f"{limit} (this API key's own)" if getattr(key, limit_name) == limit else f"{limit}"
    if reason.endswith(base.TOO_LARGE):
        need = prompt_tokens if bucket == base.INPUT_TOKENS else admission.reserved_out
        # No Retry-After: waiting never helps a request larger than the bucket itself.
        return ApiError(
            429,
            f"Request too large for {text}: it needs {need}, the limit is {limit_text}. Send fewer "
            f"tokens{' or a lower max_tokens' if bucket == base.OUTPUT_TOKENS else ''}.",
            type_,
            "rate_limit_exceeded",
            param=None,
        )
    return ApiError(
        429,
        f"Rate limit reached for {text}: limit {limit_text}. Please try again in {admission.retry_after_s:.3g}s.",
        type_,
        "rate_limit_exceeded",
        headers=headers,
    )
