"""Speculative decoding parts that stand alone; the engine's step loop wires them together.

    ngram_proposer.py     NgramProposer: draft tokens by prompt lookup (a point mass: draft_probs=None)
    rejection_sampler.py  rejection_sample: exact verification of a padded batch of drafts against the target
    acceptance.py         SpecDecodeController: rolling acceptance and the adaptive on/off rule
    metrics.py            SpecDecodeStats and vLLM's vllm:spec_decode_* counters

One step for a speculating sequence:
  1. controller.decide(decoding request ids) says which sequences draft this step.
  2. Draft k tokens: NgramProposer.propose(prompt + output ids, num_tokens=tokens left), or k draft-model steps,
     keeping q, the distribution each draft token was actually sampled from (after the request's temperature,
     top-k, top-p and min-p; greedy requests draft the argmax).
  3. One target forward over the k + 1 positions; target_probs after the same per-request processing, where
     position i sees drafts x_<i as already generated (penalties, min_tokens, a grammar's mask:
     engine/structured/draft_masks.py).
  4. rejection_sample(...) gives the tokens to append; KV written for rejected drafts is rolled back.
  5. stats.observe(...) and controller.record(...) with num_draft_tokens and num_accepted.
"""
