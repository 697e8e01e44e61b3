"""config/tenants.yaml: tenants and keys created at start-up when missing (admin changes made since win).

    tenants:
      - id: acme
        rpm: 600
        input_tpm: 200000
        output_tpm: 50000
        models: [tiny]
        keys:
          - {name: dev, key: sk-sg-acme-dev}          # plaintext: for local development only
          - {name: prod, key_sha256: <hex digest>}     # or just its digest
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import yaml

from gateway.config import ConfigError
from gateway.errors import ApiError
from gateway.tenants import ApiKey, Tenant, apply_tenant_fields, digest_key, key_id_of, validate_tenant_id


async def seed_tenants(store, path: str, check_policy: Callable[[str], None]) -> int:
    """Create the seeded tenants and keys that do not exist yet; return how many records were created.
    `check_policy` (tenants.policy_name_check) makes a guardrail policy the gateway does not define a ConfigError."""
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"tenants seed {path!r} cannot be read: {exc}") from None
    created = 0
    existing = {t.id for t in await store.list_tenants()}
    for entry in raw.get("tenants") or []:
        entry = dict(entry)
        keys = entry.pop("keys", []) or []
        try:
            tenant_id = validate_tenant_id(entry.pop("id", None))
            if tenant_id not in existing:
                await store.put_tenant(apply_tenant_fields(Tenant(id=tenant_id), entry, check_policy))
                created += 1
        except ApiError as exc:
            raise ConfigError(f"tenants seed {path!r}: {exc.message}") from None
        known = {k.digest for k in await store.list_keys(tenant_id)}
        for spec in keys:
            digest = spec.get("key_sha256") or (digest_key(spec["key"]) if spec.get("key") else None)
            if not digest:
                raise ConfigError(f"tenants seed {path!r}: a key of {tenant_id!r} needs `key` or `key_sha256`")
            if digest not in known:
                await store.put_key(ApiKey(key_id_of(digest), tenant_id, digest, name=str(spec.get("name", "")),
                                           created_at=time.time(), expires_at=float(spec.get("expires_at", 0))))
                created += 1
    return created
