"""Print pyproject.toml's base dependencies minus the distributions named after it, one per line.

    python requirements.py pyproject.toml > requirements.txt   # the gateway image's dependency layer (no torch)

The image installs these before copying the sources, so editing code does not reinstall every dependency.
"""

import re
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    dependencies = tomllib.load(f)["project"]["dependencies"]
excluded = {name.lower() for name in sys.argv[2:]}
print("\n".join(d for d in dependencies if re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() not in excluded))
