"""`sluicegate admin ...`: the admin API from a shell. URL and token from --url/--token or SLUICEGATE_ADMIN_URL and
SLUICEGATE_ADMIN_TOKEN. Prints the API's JSON; exits 1 with the API's error message when it refuses.

    sluicegate admin tenants list
    sluicegate admin tenants create acme --set rpm=600 --set input_tpm=200000 --set models=tiny,small
    sluicegate admin tenants get acme | update acme --set rpm=1200 | delete acme
    sluicegate admin tenants update acme --set daily_budget_usd=25 --set monthly_budget_usd=500
    sluicegate admin tenants update acme-eu --set cache_group=acme     (share a prefix cache; cache_group= leaves)
    sluicegate admin keys create acme [--name dev] [--ttl-s 86400] [--set rpm=60]
    sluicegate admin keys list acme | revoke acme k_1234abcd5678 | delete acme k_1234abcd5678
    sluicegate admin keys update acme k_1234abcd5678 --set name=ci --set rpm=60 --set expires_at=0
    sluicegate admin keys rotate acme k_1234abcd5678 [--grace-s 300]     (default grace: a day)
    sluicegate admin usage acme [--days 30]      per day and in total: tokens and cost (USD), per model and key
    sluicegate admin replicas list tiny | add tiny r3 http://10.0.0.7:8100 [--no-kv-events] [--role decode]
                              | drain tiny r3 | remove tiny r3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from urllib.parse import quote

import httpx

LIST_FIELDS = {"models"}
BOOL_FIELDS = {"isolate_cache"}
STRING_FIELDS = {"guardrails", "name", "cache_group"}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _fields(pairs: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set wants NAME=VALUE, got {pair!r}")
        if name in LIST_FIELDS:
            out[name] = [v for v in value.split(",") if v]
        elif name in BOOL_FIELDS:
            if value.lower() not in _TRUE + _FALSE:
                raise SystemExit(f"--set {name} wants true or false, got {value!r}")
            out[name] = value.lower() in _TRUE
        elif name in STRING_FIELDS:
            out[name] = value
        else:
            try:
                out[name] = int(value)
            except ValueError:
                out[name] = float(value) if value.replace(".", "", 1).isdigit() else value
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluicegate admin", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=os.environ.get("SLUICEGATE_ADMIN_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("SLUICEGATE_ADMIN_TOKEN"))
    groups = parser.add_subparsers(dest="group", required=True)

    tenants = groups.add_parser("tenants").add_subparsers(dest="action", required=True)
    tenants.add_parser("list")
    for action in ("create", "update"):
        p = tenants.add_parser(action)
        p.add_argument("tenant")
        p.add_argument("--set", action="append", metavar="FIELD=VALUE", default=[])
    for action in ("get", "delete"):
        tenants.add_parser(action).add_argument("tenant")

    keys = groups.add_parser("keys").add_subparsers(dest="action", required=True)
    create = keys.add_parser("create")
    create.add_argument("tenant")
    create.add_argument("--name", default="")
    create.add_argument("--ttl-s", type=float)
    create.add_argument("--set", action="append", metavar="FIELD=VALUE", default=[])
    keys.add_parser("list").add_argument("tenant")
    for action in ("update", "revoke", "rotate", "delete"):
        p = keys.add_parser(action)
        p.add_argument("tenant")
        p.add_argument("key_id")
        if action == "update":
            p.add_argument("--set", action="append", metavar="FIELD=VALUE", default=[])
        if action == "rotate":  # no default here: the API's (a day) applies when it is not given
            p.add_argument("--grace-s", type=float, help="seconds the old key keeps working (default 86400; 0: none)")

    usage = groups.add_parser("usage")
    usage.add_argument("tenant")
    usage.add_argument("--days", type=int, default=7)

    replicas = groups.add_parser("replicas").add_subparsers(dest="action", required=True)
    replicas.add_parser("list").add_argument("model")
    add = replicas.add_parser("add")
    add.add_argument("model")
    add.add_argument("name")
    add.add_argument("replica_url", metavar="url")  # not `url`: that is the gateway's (--url)
    add.add_argument("--no-kv-events", action="store_true", help="an upstream without /v1/kv/events (vLLM, others)")
    add.add_argument(
        "--role", choices=("prefill", "decode", "both"), default="both", help="its `sluicegate engine --kv-role`"
    )
    for action in ("drain", "remove"):
        p = replicas.add_parser(action)
        p.add_argument("model")
        p.add_argument("name")
    return parser


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, object] | None]:
    if args.group == "replicas":
        path = f"/models/{quote(args.model, safe='/')}/replicas"  # a model name may hold '/' (org/model)
        if args.action == "list":
            return "GET", path, None
        if args.action == "add":
            replica = {
                "name": args.name,
                "url": args.replica_url,
                "kv_events": not args.no_kv_events,
                "role": args.role,
            }
            return "POST", path, replica
        name = _segment(args.name)
        return ("POST", f"{path}/{name}/drain", None) if args.action == "drain" else ("DELETE", f"{path}/{name}", None)
    if args.group == "tenants":
        path = "/tenants" if args.action in ("list", "create") else f"/tenants/{_segment(args.tenant)}"
        if args.action == "list":
            return "GET", path, None
        if args.action == "create":
            return "POST", path, {"id": args.tenant, **_fields(args.set)}
        if args.action == "update":
            return "PATCH", path, _fields(args.set)
        return ("GET" if args.action == "get" else "DELETE"), path, None
    if args.group == "keys":
        path = f"/tenants/{_segment(args.tenant)}/keys"
        if args.action == "create":
            body = {"name": args.name, **_fields(args.set)}
            if args.ttl_s is not None:  # the API refuses 0 and negatives: never turn them into "no expiry"
                body["ttl_s"] = args.ttl_s
            return "POST", path, body
        if args.action == "list":
            return "GET", path, None
        key_path = f"{path}/{_segment(args.key_id)}"
        if args.action == "update":
            return "PATCH", key_path, _fields(args.set)
        if args.action == "delete":
            return "DELETE", key_path, None
        if args.action == "revoke":
            return "POST", f"{key_path}/revoke", None
        return "POST", f"{key_path}/rotate", {} if args.grace_s is None else {"grace_s": args.grace_s}
    return "GET", f"/tenants/{_segment(args.tenant)}/usage?days={args.days}", None


def _segment(value: str) -> str:
    """One path segment: a name holding '/' or '?' must not change the path."""
    return quote(value, safe="")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.token:
        print("sluicegate admin: no admin token (--token or SLUICEGATE_ADMIN_TOKEN)", file=sys.stderr)
        return 2
    method, path, body = _request(args)
    try:
        response = httpx.request(
            method,
            args.url.rstrip("/") + "/admin/v1" + path,
            json=body,
            timeout=30,
            headers={"authorization": f"Bearer {args.token}"},
        )
    except httpx.HTTPError as exc:
        print(f"sluicegate admin: cannot reach {args.url}: {exc}", file=sys.stderr)
        return 1
    try:
        payload = response.json()
    except ValueError:
        payload = {"error": {"message": response.text}}
    if not response.is_success:  # a redirect too: the admin API never redirects, so the URL is wrong
        message = payload.get("error", {}).get("message") if isinstance(payload, dict) else None
        print(
            f"sluicegate admin: HTTP {response.status_code}: {message or response.text or 'no message'}",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
