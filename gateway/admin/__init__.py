"""Administration: tenants and keys as records (tenants.py), the admin API under /admin/v1 (api.py, replicas.py),
its command-line client (cli.py) and the tenants seed applied at start-up (seed.py). Nothing here is on the
request path except the records themselves, which auth and admission read."""
