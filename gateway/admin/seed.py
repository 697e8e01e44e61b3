"""config/tenants.yaml: tenants and keys created at start-up when missing (admin changes made since win).

    tenants:
      - id: acme
        rpm: 600
        input_tpm: 200000
        output_tpm: 50000
        models: [tiny]
        daily_budget_usd: 25                          # at the models' prices (gateway config: models.<m>.price)
        cache_group: acme                             # share a prefix cache with the group's other tenants
        keys:
          - {name: dev, key: sk-sg-acme-dev}          # plaintext: for local development only
          - {name: prod, key_sha256: <hex digest>}     # or just its digest

`load_seed` validates the whole file (the gateway command runs it before serving: a bad seed exits 2 with the field
named); `seed_tenants` applies it to the store.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import AfterValidator, Field, ValidationError, model_validator

from gateway.admin.tenants import (
    ApiKey,
    CheckTenant,
    Tenant,
    TenantId,
    TenantUpdate,
    UnixSeconds,
    digest_key,
    key_id_of,
)
from gateway.config import ConfigError
from gateway.errors import ApiError
from gateway.store.base import AdminStore
from sluicegate.schema import Schema, explain
from sluicegate.yaml_files import load_yaml


def _sha256_hex(digest: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{64}", digest):  # what digest_key produces; any other form never matches a key
        raise ValueError("want the key's sha256 as 64 lower-case hex digits (printf %s KEY | sha256sum)")
    return digest


class SeedKey(Schema):
    name: str = ""
    """A label for the key (admin API listings)."""
    key: Annotated[str, Field(min_length=1)] | None = None
    """The key in plain text: for local development only."""
    key_sha256: Annotated[str, AfterValidator(_sha256_hex)] | None = None
    """Its sha256 as 64 lower-case hex digits: the form to keep in a repository."""
    expires_at: UnixSeconds = 0.0
    """Unix seconds; 0 never expires."""

    @model_validator(mode="after")
    def _one_secret(self) -> SeedKey:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("give a key either `key` or `key_sha256`, not both or neither")
        return self

    @property
    def digest(self) -> str:
        return self.key_sha256 or digest_key(self.key or "")


class SeedTenant(TenantUpdate):
    id: TenantId
    """The tenant's id (letters, digits, `_.-`, at most 64)."""
    keys: list[SeedKey] = []
    """Its API keys."""


class Seed(Schema):
    tenants: list[SeedTenant] = []
    """Tenants to create when missing."""


def load_seed(path: str) -> Seed:
    """The seed file, validated; ConfigError names the file, the field and the fix."""
    try:
        raw = load_yaml(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"tenants seed {path!r} cannot be read: {exc}") from None
    try:
        return Seed.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"tenants seed {path!r}: {explain(exc)}") from None


async def seed_tenants(store: AdminStore, path: str, check_tenant: CheckTenant) -> int:
    """Create the seeded tenants and keys that do not exist yet; return how many records were created.
    `check_tenant` (tenants.make_tenant_check, as the admin API's) makes what the API would refuse a ConfigError."""
    seed = load_seed(path)
    created = 0
    existing = {t.id for t in await store.list_tenants()}
    for entry in seed.tenants:
        if entry.id not in existing:
            fields = entry.model_dump(include=entry.model_fields_set - {"id", "keys"})
            try:
                await store.put_tenant(check_tenant(Tenant(id=entry.id), fields))
            except ApiError as exc:
                raise ConfigError(f"tenants seed {path!r}: {exc.message}") from None
            created += 1
        known = {k.digest for k in await store.list_keys(entry.id)}
        for spec in entry.keys:
            if spec.digest not in known:
                await store.put_key(
                    ApiKey(
                        key_id_of(spec.digest),
                        entry.id,
                        spec.digest,
                        name=spec.name,
                        created_at=time.time(),
                        expires_at=spec.expires_at,
                    )
                )
                created += 1
    return created
