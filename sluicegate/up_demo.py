"""`sluicegate up`'s credentials: the demo API key, kept in the state folder so that with Redis every run reuses the
one key it seeded (rather than adding another never-expiring key each run); the admin token, made per run unless
given; and a look at whether the demo tenant holds keys that `up` did not make.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.error
import urllib.request
from pathlib import Path

from gateway.admin.tenants import digest_key, key_id_of

DEMO_TENANT = "sluicegate-up"
"""Not "demo": with a shared Redis, a tenant of that common name may be someone else's, and `up` would silently
add its key to it. This name marks the tenant as the one `up` made."""
DEMO_KEY_FILE = "demo-key"
DEMO_KEY_ENV = "SLUICEGATE_DEMO_KEY"
ADMIN_TOKEN_ENV = "SLUICEGATE_ADMIN_TOKEN"


def demo_key(state_dir: Path) -> str:
    """SLUICEGATE_DEMO_KEY when set; else the key an earlier run kept in state_dir; else a new one, kept there."""
    given = os.environ.get(DEMO_KEY_ENV)
    if given:
        return given
    path = state_dir / DEMO_KEY_FILE
    if path.is_file() and path.read_text().strip():
        return path.read_text().strip()
    key = "sk-sg-demo-" + secrets.token_urlsafe(24)
    write_private(path, key + "\n")
    return key


def write_private(path: Path, text: str) -> None:
    """A file holding a secret (the demo key, the tenants seed with it): readable by its owner only."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # a file an earlier run left keeps its mode through os.open
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


def admin_token(env: dict[str, str]) -> tuple[str, bool]:
    """(token, made): SLUICEGATE_ADMIN_TOKEN when set in `env`, else a new random one (made=True) for this run."""
    given = env.get(ADMIN_TOKEN_ENV)
    if given:
        return given, False
    return "sk-admin-" + secrets.token_urlsafe(24), True


def foreign_keys(gateway_url: str, token: str, api_key: str, timeout_s: float = 10.0) -> list[str]:
    """Key ids of the demo tenant other than `api_key`'s: made by an admin, or by `up` from another state folder
    (a shared Redis). Empty when the admin API cannot say."""
    request = urllib.request.Request(
        f"{gateway_url}/admin/v1/tenants/{DEMO_TENANT}/keys", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            keys = json.load(response)["data"]
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return []
    ours = key_id_of(digest_key(api_key))
    return [key["key_id"] for key in keys if key["key_id"] != ours]
