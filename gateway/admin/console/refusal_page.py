"""Recent refusals (gateway/request/refusals.py): when, which tenant and key, the status, error code and message
the client got. A refusal answered before the request path had resolved the key (a local rate-limit pre-check, a bad
key) is named here by looking its digest up in the store, once per distinct key."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.responses import Response

from gateway.admin.console.page import Page
from gateway.request.refusals import Refusal

SHOWN = 200


@dataclass(frozen=True, slots=True)
class RefusalRow:
    refusal: Refusal
    tenant_id: str
    key_name: str


async def list_refusals(page: Page) -> Response:
    wanted = page.request.query_params.get("tenant", "").strip()
    names: dict[str, tuple[str, str]] = {}  # digest -> (tenant, key name) as the store has them
    rows = []
    for refusal in page.gw.endpoint_parts.refusals.recent():
        tenant_id, key_name = refusal.tenant_id, refusal.key_name
        if not tenant_id and refusal.digest:
            if refusal.digest not in names:
                key = await page.gw.store.get_key(refusal.digest)
                names[refusal.digest] = (key.tenant_id, key.name) if key else ("", "")
            tenant_id, key_name = names[refusal.digest]
        if wanted and tenant_id != wanted:
            continue
        rows.append(RefusalRow(refusal, tenant_id, key_name))
        if len(rows) >= SHOWN:
            break
    return page.render("refusals.html", rows=rows, tenant_filter=wanted)
