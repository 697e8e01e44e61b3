"""One-off developer step: copy the labelled injection data from an evaluation-data folder into
guardrails/injection/data/.

    python -m guardrails.injection.import_data --source PATH/TO/evals

The project reads only the copies (jsonl.gz, one per upstream file) at training and test time.
Provenance and licenses are in data/README.md. The deepset parquet has no `source`/`lang` fields: `source` is set
to its dataset name and `lang` from a stop-word count (deepset is mostly English and German).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
DEEPSET_SOURCE = "deepset/prompt-injections:train"
_STOPWORDS = {
    "en": {"the", "and", "you", "is", "what", "of", "to", "a", "in", "how"},
    "de": {"der", "die", "das", "und", "ist", "du", "nicht", "ich", "wie", "was", "sie", "ein", "eine", "mit"},
    "es": {"el", "la", "los", "las", "y", "es", "que", "de", "en", "por", "una", "como"},
}


def guess_lang(text: str) -> str:
    words = re.findall(r"\w+", text.lower())
    counts = {lang: sum(word in stop for word in words) for lang, stop in _STOPWORDS.items()}
    best = max(counts, key=counts.__getitem__)
    return best if counts[best] else "en"


def write_jsonl_gz(path: Path, rows: list[dict]) -> None:
    # mtime=0: the same rows give the same bytes, so re-running the import does not churn git
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        for row in rows:
            gz.write((json.dumps(row, ensure_ascii=False) + "\n").encode())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--source", type=Path, required=True, help="folder holding injection/*.jsonl and the deepset parquet"
    )
    args = parser.parse_args(argv)
    DATA_DIR.mkdir(exist_ok=True)
    for src in sorted((args.source / "injection").glob("*.jsonl")):
        # split on "\n" only: str.splitlines would also split inside texts that hold U+2028
        rows = [json.loads(line) for line in src.read_text().split("\n") if line.strip()]
        write_jsonl_gz(DATA_DIR / (src.name + ".gz"), rows)
        print(f"{src.name}: {len(rows)} rows")
    import pyarrow.parquet as pq  # a dev dependency: only this one-off step reads parquet

    table = pq.read_table(args.source / "prompt_injection_deepset_train.parquet").to_pylist()
    rows = [
        {"text": r["text"], "label": int(r["label"]), "source": DEEPSET_SOURCE, "lang": guess_lang(r["text"])}
        for r in table
    ]
    write_jsonl_gz(DATA_DIR / "mixed_deepset_prompt_injections_train.jsonl.gz", rows)
    print(f"deepset: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
