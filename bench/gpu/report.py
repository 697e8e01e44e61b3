"""The benchmark's one table: rows appended as sections finish, saved as JSON after each row so that a run cut
short still leaves everything it measured."""

from __future__ import annotations

import json
import os
import platform
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Row:
    section: str
    item: str
    value: float | str | None
    unit: str = ""
    versus: str = ""  # the yardstick: tolerance, peak bandwidth, goal
    status: str = ""  # PASS / FAIL / INFO / SKIP


@dataclass
class Report:
    out_dir: Path
    rows: list[Row] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def add(self, row: Row, echo: bool = True) -> None:
        self.rows.append(row)
        if echo:
            print(f"  {_line(row)}", flush=True)
        self.save()

    def fail(self, section: str, item: str, error: BaseException) -> None:
        message = f"{type(error).__name__}: {error}".replace("\n", " ")[:300]
        traceback.print_exception(error)
        self.add(Row(section, item, message, status="FAIL"))

    def save(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        body = {"meta": self.meta, "rows": [asdict(r) for r in self.rows]}
        (self.out_dir / "bench_gpu.json").write_text(json.dumps(body, indent=2))

    def table(self) -> str:
        header = f"{'section':<8} {'item':<52} {'value':>12} {'unit':<8} {'versus':<26} status"
        lines = [header, "-" * len(header)]
        lines += [_line(r) for r in self.rows]
        failed = sum(r.status == "FAIL" for r in self.rows)
        lines.append(f"{len(self.rows)} rows, {failed} FAIL")
        return "\n".join(lines)


def _line(r: Row) -> str:
    return f"{r.section:<8} {r.item:<52} {_fmt(r.value):>12} {r.unit:<8} {r.versus:<26} {r.status}"


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)[:60]


def new_report() -> Report:
    out_dir = Path(os.environ.get("OUT") or "bench_gpu_out")
    meta = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node()}
    return Report(out_dir=out_dir, meta=meta)
