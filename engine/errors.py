"""Engine error taxonomy.

EngineError
 +-- RequestError          one request is wrong; the replica is fine (server: 400)
 |    +-- ContextLengthError   prompt + max_tokens exceed the model's context
 |    +-- RequestTooLargeError the request can never fit in the KV cache
 +-- EngineDeadError       the step loop crashed; the replica is unhealthy and must exit
"""


class EngineError(Exception):
    pass


class RequestError(EngineError, ValueError):
    """A request the engine will not run. `param` names the offending field when there is one."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class ContextLengthError(RequestError):
    def __init__(self, num_prompt_tokens: int, max_tokens: int, max_model_len: int):
        super().__init__(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{num_prompt_tokens + max_tokens} tokens ({num_prompt_tokens} in the prompt, {max_tokens} for the "
            "completion). Please reduce the length of the prompt or max_tokens.",
            param="max_tokens" if num_prompt_tokens < max_model_len else "prompt",
        )
        self.num_prompt_tokens = num_prompt_tokens
        self.max_tokens = max_tokens
        self.max_model_len = max_model_len


class RequestTooLargeError(RequestError):
    def __init__(self, num_tokens: int, num_blocks_needed: int, num_blocks_total: int):
        super().__init__(
            f"The request needs {num_blocks_needed} KV-cache blocks for {num_tokens} tokens but the cache has "
            f"{num_blocks_total} in all; it can never run. Lower max_tokens or give the engine more KV memory "
            "(--kv-cache-memory-bytes or --num-kv-blocks).",
            param="max_tokens",
        )


class EngineDeadError(EngineError):
    pass
