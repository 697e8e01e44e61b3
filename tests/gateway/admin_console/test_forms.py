"""Form bodies into the admin API's update bodies (pure logic), and the chart geometry and usage rates the
console draws."""

from __future__ import annotations

import pytest

from gateway.admin.console.charts import HEIGHT_PX, PAD_PX, WIDTH_PX, line_chart
from gateway.admin.console.forms import MAX_FORM_BYTES, expiry_body, key_body, parse_form, tenant_body
from gateway.admin.console.usage import UsageSample, UsageSampler, per_minute
from gateway.errors import ApiError


def test_a_form_is_read_and_oversized_or_undecodable_ones_are_refused():
    assert parse_form(b"a=1&b=&c=x+y&c=z") == {"a": "1", "b": "", "c": "z"}
    with pytest.raises(ApiError) as too_big:
        parse_form(b"a=" + b"x" * MAX_FORM_BYTES)
    assert too_big.value.status == 413
    with pytest.raises(ApiError) as bad:
        parse_form(b"a=\xff\xfe")
    assert bad.value.status == 400


def test_tenant_form_fields_become_the_api_body():
    form = {
        "rpm": "60",
        "input_tpm": "",
        "output_tpm": "1000",
        "daily_budget_usd": "2.5",
        "guardrails": " strict ",
        "models": "a, b  c",
        "cache_group": " acme ",
        "default_max_tokens": "",
    }
    body = tenant_body(form)
    assert body == {
        "rpm": 60,
        "input_tpm": 0,
        "output_tpm": 1000,
        "daily_budget_usd": 2.5,
        "guardrails": "strict",
        "models": ["a", "b", "c"],
        "cache_group": "acme",
    }
    with pytest.raises(ApiError) as bad:
        tenant_body({"rpm": "ten"})
    assert bad.value.status == 400 and bad.value.param == "rpm"


def test_key_expiry_from_hours():
    assert expiry_body({"ttl_h": ""}) == {"expires_at": 0.0}
    assert expiry_body({"ttl_h": "0"}) == {"expires_at": 0.0}
    assert expiry_body({"ttl_h": "1.5"}) == {"ttl_s": 5400.0}
    assert expiry_body({}) == {}
    with pytest.raises(ApiError):
        expiry_body({"ttl_h": "-1"})
    assert key_body({"name": " ci ", "rpm": "5", "ttl_h": "2"}) == {"name": "ci", "rpm": 5, "ttl_s": 7200.0}


def test_a_chart_scales_to_the_larger_of_limit_and_peak():
    chart = line_chart("r", "per min", [(0.0, 10.0), (5.0, 20.0)], (-5.0, 5.0), limit=40)
    assert chart.y_max == 40 and chart.latest == 20.0 and chart.peak == 20.0 and not chart.over_limit
    first, last = (tuple(map(float, p.split(","))) for p in chart.points.split())
    assert first[1] > last[1]  # more is higher up
    assert last[1] == pytest.approx(PAD_PX + (HEIGHT_PX - 2 * PAD_PX) / 2)
    assert first[0] == pytest.approx(WIDTH_PX / 2) and last[0] == pytest.approx(WIDTH_PX - PAD_PX)  # the x range
    over = line_chart("r", "per min", [(0.0, 50.0)], (0.0, 1.0), limit=40)
    assert over.over_limit and over.y_max == 50
    assert line_chart("r", "per min", [], (0.0, 1.0)).points == ""


def _sample(at_s: float, day: str, requests: int) -> UsageSample:
    return UsageSample(at_s, day, requests, requests * 10, requests * 2)


def test_the_rate_is_the_use_in_the_minute_before_never_scaled_up():
    samples = [_sample(0, "d", 0), _sample(1, "d", 3), _sample(30, "d", 5), _sample(70, "d", 6), _sample(200, "d", 8)]
    # 3 requests a second after the first reading are 3 a minute, not 180; at 70 s the latest reading at least a
    # minute older is the one at 1 s: 3 requests in 69 s, scaled down to a minute; at 200 s it is the one at 70 s
    expected = [(-199.0, 3.0), (-170.0, 5.0), (-130.0, 3 * 60 / 69), (0.0, 2 * 60 / 130)]
    assert per_minute(samples, "requests", 200) == expected
    assert per_minute(samples, "input_tokens", 200)[0] == (-199.0, 30.0)


def test_rates_restart_at_midnight():
    samples = [_sample(0, "d1", 0), _sample(30, "d1", 3), _sample(60, "d2", 1), _sample(90, "d2", 4)]
    assert per_minute(samples, "requests", 90) == [(-60.0, 3.0), (0.0, 3.0)]


def test_the_sampler_keeps_one_sample_a_second_per_tenant():
    sampler = UsageSampler()
    assert len(sampler.add("t", UsageSample(0.0, "d", 0, 0, 0))) == 1
    assert len(sampler.add("t", UsageSample(0.5, "d", 1, 0, 0))) == 1  # too soon: the last one stands
    assert len(sampler.add("t", UsageSample(2.0, "d", 1, 0, 0))) == 2
    assert len(sampler.add("u", UsageSample(2.0, "d", 1, 0, 0))) == 1
