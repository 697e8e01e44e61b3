"""The PII section of `sluicegate bench guardrails` for names, places and organizations beside the structured types.

quality   per-type precision / recall (a prediction counts when it overlaps a label of its type) on held-out data:
          structured values from bench/guardrails.py's generators, and PERSON / LOCATION / ORGANIZATION from
          sources the shipped tagger never trained on (UNER English EWT web text, all of WNUT-17) plus template
          sentences with held-out names (guardrails/ner/synthetic.py). Once on the input path, once on streamed
          output (StreamRedactor, random 1-3 character chunks, mask style so output offsets equal input offsets),
          where `leaked` counts labels not masked whole.
latency   PII scan p50 on ~100-token prompts with names, ours vs stock Presidio in the same run (stock: Presidio's
          default recognizers on a blank spaCy pipeline, since no spaCy model can be installed here: it cannot
          find names at all), and StreamRedactor per-chunk p50.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from guardrails.ner.corpus import HELD_OUT_SOURCES, load_source
from guardrails.ner.synthetic import sentences as template_sentences

NAME_TYPES = ("PERSON", "LOCATION", "ORGANIZATION")
STRUCTURED_TYPES = ("EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "US_SSN", "IP_ADDRESS")
PROMPT_CHARS = 400  # ~100 tokens at 4 characters a token


def name_samples(rng: random.Random, num: int) -> dict[str, list[tuple[str, list[tuple[str, int, int]]]]]:
    """Held-out labelled sentences by source, an equal share from each held-out source."""
    # The shipped tagger never trained on any of WNUT-17 (its train split included): all of it is held out.
    pools = {name: load_source(name) for name in HELD_OUT_SOURCES}
    pools["templates"] = template_sentences("test", max(num, 100), seed=29)
    per_pool = max(1, num // len(pools))
    out: dict[str, list[tuple[str, list[tuple[str, int, int]]]]] = {}
    for source, pool in pools.items():
        out[source] = [
            (sentence.text, [(e, start, end) for start, end, e in sentence.spans if sentence.text[start] not in "@#"])
            for sentence in rng.sample(pool, min(per_pool, len(pool)))
        ]
    return out


def prompts(samples, rng: random.Random, count: int) -> list[str]:
    """~100-token texts made of held-out sentences, for latency."""
    out = []
    for _ in range(count):
        text = ""
        while len(text) < PROMPT_CHARS:
            text += rng.choice(samples)[0] + " "
        out.append(text.strip())
    return out


def streamed_predictions(engine, policy, text: str, rng: random.Random) -> tuple[list[tuple[str, int, int]], list]:
    """Spans masked in the streamed output, typed by the whole-text finding they overlap; and per-chunk timings."""
    from bench.guardrails import timed

    redactor = engine.stream_redactor(policy)
    out, spent = [], []
    i = 0
    while i < len(text):
        size = rng.randint(1, 3)
        emitted, seconds = timed(redactor.feed, text[i : i + size])
        out.append(emitted)
        spent.append(seconds)
        i += size
    out.append(redactor.finish())
    masked_text = "".join(out)
    whole = engine.scanner.scan(text, policy)
    runs, start = [], None
    for k, char in enumerate(masked_text + " "):
        masked = k < len(text) and char == "*" and text[k] != "*"
        if masked and start is None:
            start = k
        elif not masked and start is not None:
            runs.append((start, k))
            start = None
    predicted = []
    for lo, hi in runs:
        overlap = [(min(hi, f.end) - max(lo, f.start), f.entity) for f in whole if f.start < hi and lo < f.end]
        predicted.append((max(overlap)[1] if overlap else "UNTYPED", lo, hi))
    return predicted, spent


def leaked(labels, predicted) -> dict[str, int]:
    """Labels of each type with at least one character left unmasked."""
    counts: dict[str, int] = defaultdict(int)
    for entity, start, end in labels:
        covered = sum(min(end, t) - max(start, s) for _, s, t in predicted if s < end and start < t)
        if covered < end - start:  # masked runs cover inner spaces too
            counts[entity] += 1
    return dict(counts)


def run_names(quick: bool, seed: int, structured_samples) -> dict:
    from bench.guardrails import build_detectors, percentiles_us, score_pii, time_calls
    from guardrails import GuardrailPolicy
    from guardrails.policy import DEFAULT_PII_ENTITIES

    rng = random.Random(seed)
    policy = GuardrailPolicy(
        pii_entities=DEFAULT_PII_ENTITIES + NAME_TYPES,
        pii_action="redact",
        output_pii_action="redact",
        redaction_style="mask",
    )
    engine, detectors = build_detectors(policy)
    by_source = name_samples(rng, 150 if quick else 1500)
    samples = structured_samples + [sample for rows in by_source.values() for sample in rows]
    report: dict = {
        "samples": len(samples),
        "input": {name: _score(score_pii, detectors[name], samples, structured_samples) for name in ("fast", "stock")},
        # Names, places and organizations on input, per held-out source: web text, tweets and templates differ
        # enough that the pooled figure hides where the tagger stands.
        "input_by_source": {
            source: {e: row for e, row in score_pii(detectors["fast"], rows).items() if e in NAME_TYPES}
            for source, rows in by_source.items()
        },
    }
    streamed, chunk_times = [], []
    leaks: defaultdict[str, int] = defaultdict(int)
    stream_set = samples if not quick else samples[::4]
    for text, labels in stream_set:
        predicted, spent = streamed_predictions(engine, policy, text, rng)
        streamed.append(predicted)
        chunk_times += spent
        for entity, count in leaked(labels, predicted).items():
            leaks[entity] += count
    by_text = dict(zip((t for t, _ in stream_set), streamed))
    report["stream"] = _score(score_pii, lambda text: by_text[text], stream_set, structured_samples)
    for entity, row in report["stream"].items():
        row["leaked"] = leaks.get(entity, 0)
    texts = prompts(samples, rng, 20 if quick else 200)
    latency: dict[str, Any] = {
        name: percentiles_us(time_calls(detectors[name], texts, 1 if quick else 3)) for name in ("fast", "stock")
    }
    latency["fast_over_stock_p50"] = latency["fast"]["p50_us"] / latency["stock"]["p50_us"]
    latency["stream_chunk"] = percentiles_us(chunk_times)
    report["latency"] = latency
    report["prompt_tokens_approx"] = round(sum(map(len, texts)) / len(texts) / 4)
    return report


def _score(score_pii, detect, samples, structured_samples) -> dict:
    """Per-type scores: the structured types on the generated prompts only, names on every sample. The name corpora
    label only names, and their web text holds real e-mail addresses and phone numbers (Enron mail in UNER EWT):
    finding those is right, but against name-only labels it would count as a false positive."""
    structured = set(map(id, structured_samples))
    on_structured = score_pii(detect, [s for s in samples if id(s) in structured])
    on_all = score_pii(detect, samples)
    table = {entity: row for entity, row in on_structured.items() if entity not in NAME_TYPES}
    return table | {entity: row for entity, row in on_all.items() if entity in NAME_TYPES}


def print_names(report: dict) -> None:
    print(
        f"\nPII with names (policy: defaults + PERSON/LOCATION/ORGANIZATION), {report['samples']} held-out samples; "
        "precision / recall, overlap match"
    )
    print(f"  {'entity':<15}{'input, ours':>16}{'input, stock':>16}{'stream, ours':>16}{'stream leaked':>15}")
    entities = [e for e in STRUCTURED_TYPES + NAME_TYPES if e in report["input"]["fast"]]
    for entity in entities:
        cells = []
        for table in (report["input"]["fast"], report["input"]["stock"], report["stream"]):
            row = table.get(entity)
            cells.append(f"{row['precision']:.2f} / {row['recall']:.2f}" if row else "-")
        n = report["input"]["fast"][entity]["support"]
        print(
            f"  {entity:<15}"
            + "".join(f"{c:>16}" for c in cells)
            + f"{report['stream'].get(entity, {}).get('leaked', 0):>10} of {n}"
        )
    for source, table in report["input_by_source"].items():
        scores = "  ".join(f"{e} {row['precision']:.2f} / {row['recall']:.2f}" for e, row in table.items())
        print(f"  input, ours, {source}: {scores}")
    lat = report["latency"]
    print(
        f"  PII scan per ~{report['prompt_tokens_approx']}-token prompt with names: ours p50 "
        f"{lat['fast']['p50_us'] / 1000:.3f} ms, stock Presidio p50 {lat['stock']['p50_us'] / 1000:.3f} ms "
        f"(ratio {lat['fast_over_stock_p50']:.2f}); stream per 1-3 char chunk p50 "
        f"{lat['stream_chunk']['p50_us']:.1f} us, p99 {lat['stream_chunk']['p99_us']:.0f} us"
    )
