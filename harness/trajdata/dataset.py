"""The dataset directory: ``records.jsonl``, ``card.json`` and ``card.md``; writing, reading and the card text.

``records.jsonl`` holds one ``TrajectoryRecord`` per line; ``card.json`` is the ``DatasetCard`` (sources with their
skip counts, every filter's count with examples, the task set and seed used, the sha256 of ``records.jsonl``);
``card.md`` renders the same card as Markdown. ``read_dataset`` checks that the records match the card's hash, so
a dataset edited after filtering is refused rather than trained on unnoticed.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

from harness.infra import atomic_write_text
from harness.trajdata.schema import DatasetCard, FilterCount, SourceSummary, TrajectoryRecord

RECORDS_FILE = "records.jsonl"
CARD_JSON = "card.json"
CARD_MD = "card.md"


def records_text(records: list[TrajectoryRecord]) -> str:
    return "".join(r.model_dump_json() + "\n" for r in records)


def make_card(name: str, sources: list[SourceSummary], records: list[TrajectoryRecord], *, n_imported: int,
              filters: list[FilterCount] | None = None, task_set: str | None = None,
              task_set_sha256: str | None = None, seed: int = 0, notes: list[str] | None = None) -> DatasetCard:
    return DatasetCard(name=name, created_at=datetime.now(UTC).isoformat(timespec="seconds"), sources=sources,
                       n_imported=n_imported, n_records=len(records), filters=list(filters or []), task_set=task_set,
                       task_set_sha256=task_set_sha256, seed=seed,
                       records_sha256=hashlib.sha256(records_text(records).encode()).hexdigest(),
                       notes=list(notes or []))


def card_markdown(card: DatasetCard) -> str:
    """The card for people: sources, what each filter removed (with examples), what is left."""
    lines = [f"# Dataset card: {card.name}", "", f"Created {card.created_at}. {card.n_imported} records imported, "
             f"**{card.n_records} kept**. Seed {card.seed}." + (f" Task set: `{card.task_set}`." if card.task_set
                                                              else " No task set given: the leak filter did not run."),
             "", "## Sources", "", "| source | format | records | skipped |", "|---|---|---|---|"]
    for s in card.sources:
        skipped = "; ".join(f"{k.count} × {k.reason}" for k in s.skipped) or "0"
        lines.append(f"| `{s.path}` | {s.source_format} | {s.records} | {skipped} |")
    lines += ["", "## Filters (in order)", "", "| filter | what it removes | in | removed | unchecked | parameters |",
              "|---|---|---|---|---|---|"]
    for f in card.filters:
        params = ", ".join(f"{k}={v}" for k, v in f.params.items()) or "–"
        lines.append(f"| {f.name} | {f.description} | {f.n_in} | {f.removed} | {f.unchecked} | {params} |")
    examples = [(f.name, e) for f in card.filters for e in f.examples]
    if examples:
        lines += ["", "## Examples of removed records (up to 5 per filter)", ""]
        lines += [f"- **{name}**: {e}" for name, e in examples]
    if card.notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in card.notes]]
    return "\n".join(lines) + "\n"


def write_dataset(out_dir: str | Path, records: list[TrajectoryRecord], card: DatasetCard) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / RECORDS_FILE, records_text(records))
    atomic_write_text(out / CARD_JSON, card.model_dump_json(indent=1))
    atomic_write_text(out / CARD_MD, card_markdown(card))
    return out


def read_dataset(path: str | Path) -> tuple[list[TrajectoryRecord], DatasetCard]:
    """Records and card of a dataset directory; raises ``ValueError`` naming the file, line and fix."""
    d = Path(path)
    card_p, rec_p = d / CARD_JSON, d / RECORDS_FILE
    if not card_p.is_file() or not rec_p.is_file():
        raise ValueError(f"{d}: no {CARD_JSON} / {RECORDS_FILE}; fix: pass a directory written by "
                         "`tgsuite data import` or `tgsuite data filter`")
    try:
        card = DatasetCard.model_validate_json(card_p.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{card_p}: not a dataset card ({exc}); fix: re-run `tgsuite data filter`") from exc
    text = rec_p.read_text(encoding="utf-8")
    if hashlib.sha256(text.encode()).hexdigest() != card.records_sha256:
        raise ValueError(f"{rec_p}: its sha256 differs from {card_p} (records_sha256); the records were changed "
                         "after the card was written; fix: re-run `tgsuite data filter` to rebuild both")
    records = []
    for i, line in enumerate(text.splitlines(), 1):
        try:
            records.append(TrajectoryRecord.model_validate_json(line))
        except ValueError as exc:
            raise ValueError(f"{rec_p}:{i}: not a trajectory record ({str(exc).splitlines()[0]}); fix: re-run "
                             "`tgsuite data import`") from exc
    return records, card
