"""The request path of the two completion endpoints, one module per stage, in the order a request meets them:

proxy.py                         -  the endpoint: runs the stages below inside settlement.py's Reservation
auth.py                          1  Bearer key -> key record and tenant (cached in-process)
parse.py, precheck.py            2  the body validated (400s that name the parameter); the local 429 pre-check
hooks.py, guardrail_wiring.py    3  input guardrails (and, in step 7, output guardrails)
prompts.py, tokenizer.py         4  the exact prompt token count and the ids routing hashes
admission.py, overlap.py         5  the store's one admission call; the overlap gate may start step 6 meanwhile
attempt.py, body.py, upstream.py 6  route, send (the upstream body), fail over to the other replicas, release
prefill.py                       6  a disaggregated model's prefill hop first: its KV handoff for the decode hop
proxy.py, stream.py              7  relay the answer (JSON or SSE) to the client
settlement.py                    8  the reservation, settled exactly once however the request ended
ratelimit_headers.py,            -  x-ratelimit-* headers and the 429s
  rejections.py
context.py                       -  the request's state as it goes (`RequestContext`, `RequestPhase`)
spans.py                         -  a tracing span per stage
"""
