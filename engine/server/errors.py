"""HTTP errors in OpenAI's error format. Every failure a client can cause or see ends as one of these.

APIError                      {"error": {"message", "type", "param", "code"}}
 +-- InvalidRequestError      400 invalid_request_error (names the offending `param`)
 +-- HTTPStatusError          404 unknown path, 405 wrong method
 +-- ModelNotFoundError       404
 +-- BodyTooLargeError        413
 +-- OverloadedError          503 with Retry-After (waiting queue full, or draining)
 +-- EngineUnavailableError   503 (the engine loop died; the replica is exiting)
 +-- InternalServerError      500 (a bug met an input nobody foresaw; only that request fails)
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse

from engine.errors import ContextLengthError, RequestError, RequestTooLargeError


class APIError(Exception):
    status_code = 500
    error_type = "server_error"

    def __init__(
        self, message: str, param: str | None = None, code: str | None = None, headers: Mapping[str, str] | None = None
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.headers: Mapping[str, str] = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status_code, headers=self.headers)


class InvalidRequestError(APIError):
    status_code = 400
    error_type = "invalid_request_error"


class HTTPStatusError(APIError):
    """Routing-level errors (unknown path 404, wrong method 405) in the same format."""

    error_type = "invalid_request_error"

    def __init__(self, status_code: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message, headers=headers)
        self.status_code = status_code


class ModelNotFoundError(APIError):
    status_code = 404
    error_type = "invalid_request_error"

    def __init__(self, model: str):
        super().__init__(f"The model `{model}` does not exist.", param="model", code="model_not_found")


class BodyTooLargeError(APIError):
    status_code = 413
    error_type = "invalid_request_error"

    def __init__(self, max_bytes: int):
        super().__init__(f"Request body exceeds {max_bytes} bytes.", code="request_too_large")


class OverloadedError(APIError):
    status_code = 503

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message, code="overloaded", headers={"Retry-After": str(retry_after_s)})


class EngineUnavailableError(APIError):
    status_code = 503

    def __init__(self, message: str = "The engine loop stopped; this replica is shutting down."):
        super().__init__(message, code="engine_dead")


class InternalServerError(APIError):
    status_code = 500


def from_request_error(exc: RequestError) -> InvalidRequestError:
    """The engine refused one request: a 400 that keeps the engine's message (with its numbers) and param."""
    if isinstance(exc, ContextLengthError):
        code = "context_length_exceeded"
    elif isinstance(exc, RequestTooLargeError):
        code = "kv_cache_capacity_exceeded"  # not 413's request_too_large: the body is fine, the cache is small
    else:
        code = None
    return InvalidRequestError(str(exc), param=exc.param, code=code)
