"""Structured outputs: a request's `response_format` / `guided_*` as a grammar its tokens must follow.

server (protocol.py)  -> GrammarSpec (spec.py): what the output must match, canonical text as the cache key
AsyncEngine           -> GrammarCompiler.submit (compiler.py): xgrammar compiles in a worker thread, an LRU keeps
                         the result; the HTTP request awaits it, so a bad schema is a 400 and the loop never waits
LLMEngine, each step  -> GrammarMasker.apply (masker.py): every constrained row's bitmask filled in one xgrammar
                         call, applied to the logits in one op, before sampling
Speculator, each step -> DraftMasks (draft_masks.py): each draft walked through its matcher in one call, cut at the
                         first token the grammar rejects, and every verification position's mask filled
LLMEngine, per token  -> the sequence's xgrammar matcher accepts it; a terminated grammar finishes it ("stop")
"""
