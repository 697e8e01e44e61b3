"""The tenant page's spend panel: today's and this month's USD at the models' prices, per model and per key, against
the tenant's USD budgets (the same counters the admin usage endpoint reads)."""

from __future__ import annotations

import re

from tests.gateway.admin_console.helpers import logged_in
from tests.gateway.conftest import REDIS_URL, Admin, serve_gateway, wait_until
from tests.gateway.test_spend import chat, priced_config, usage_response


def _dollars(html: str, element_id: str) -> float:
    found = re.search(rf'id="{element_id}">\$([0-9.]+)<', html)
    assert found, f"no {element_id} on the page"
    return float(found.group(1))


def test_the_tenant_page_shows_spend_per_model_and_key(fake, tokenizer_dir, clean_redis):
    with serve_gateway(priced_config(fake.url, tokenizer_dir, REDIS_URL)) as gw:
        gw.admin = Admin(gw.url)
        tenant = gw.admin.tenant(daily_budget_usd=5)
        key = gw.admin.key(tenant, name="billing-test")
        client, _ = logged_in(gw.url)
        before = client.get(f"/tenants/{tenant}").text
        assert _dollars(before, "spend-today") == 0.0 and "of $5.00" in before

        chat(gw, key, prompt_tokens=50, tokens=10)  # tiny: 50 x $2 + 10 x $8 per million = $0.00018
        wait_until(lambda: usage_response(gw, tenant)["days"] and usage_response(gw, tenant)["days"][0]["requests"])
        page = client.get(f"/tenants/{tenant}").text
        assert _dollars(page, "spend-today") == _dollars(page, "spend-month") == 0.0002  # shown to 4 places
        model_row = re.search(r'class="spend-model">.*?<td>tiny</td><td>50</td><td>10</td><td>0.0002</td>', page, re.S)
        assert model_row, page
        assert re.search(r'class="spend-key">.*?<td>k_[0-9a-f]+</td><td>50</td><td>10</td>', page, re.S)
