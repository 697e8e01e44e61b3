"""Print pyproject.toml's runtime dependencies minus the distributions named after it, one per line.

    python requirements.py pyproject.toml torch triton > requirements.txt   # the gateway image: no torch
"""

import re
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    dependencies = tomllib.load(f)["project"]["dependencies"]
excluded = {name.lower() for name in sys.argv[2:]}
print("\n".join(d for d in dependencies if re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() not in excluded))
