import json

from bench import guardrails as bench


def test_bench_runs_end_to_end_on_a_minimal_size(capsys):
    assert bench.main(["--quick", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pii_quality"]["fast"]["EMAIL_ADDRESS"]["recall"] > 0.5
    assert report["streaming"]["1-char chunks"]["equal_to_whole_text"] == 1.0
    assert set(report["input_latency"]) == {"fast", "presidio", "stock", "check_input"}
    assert 0.0 <= report["injection"]["deepset"]["0.5"]["recall"] <= 1.0


def test_generated_values_are_valid():
    import random

    rng = random.Random(3)
    digits = [int(c) for c in bench._card(rng) if c.isdigit()]
    checksum = sum(d if i % 2 == 0 else (d * 2 - 9 if d * 2 > 9 else d * 2) for i, d in enumerate(reversed(digits)))
    assert checksum % 10 == 0
    iban = bench._iban(rng).replace(" ", "")
    assert int("".join(str(int(c, 36)) for c in iban[4:] + iban[:4])) % 97 == 1
