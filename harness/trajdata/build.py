"""The two dataset steps as library calls: import logs into a dataset, filter a dataset into a new one.

``import_dataset`` writes every imported record (no filter) with a card listing the sources and their skips;
``filter_dataset`` reads such a dataset, applies ``harness.trajdata.filters`` and writes the kept records with a card
that adds one count per filter. Both refuse to overwrite a dataset directory that already holds records.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.schema import TaskSet
from harness.trajdata.dataset import RECORDS_FILE, make_card, read_dataset, write_dataset
from harness.trajdata.filters import FilterOptions, RewardOf, apply_filters
from harness.trajdata.importer import ImportFormat, import_sources
from harness.trajdata.schema import DatasetCard


def _fresh(out: Path) -> None:
    if (out / RECORDS_FILE).exists():
        raise FileExistsError(f"{out}: already holds a dataset ({RECORDS_FILE}); choose a new --out directory")


def import_dataset(sources: Sequence[str | Path], out_dir: str | Path, *, fmt: ImportFormat = "auto",
                   skip_invalid: bool = False, default_instance_id: str | None = None,
                   score_name: str | None = None) -> DatasetCard:
    out = Path(out_dir)
    _fresh(out)
    res = import_sources(sources, fmt=fmt, skip_invalid=skip_invalid, default_instance_id=default_instance_id,
                         score_name=score_name)
    card = make_card(out.name, res.sources, res.records, n_imported=len(res.records),
                     notes=["unfiltered: run `tgsuite data filter` before training on it"])
    write_dataset(out, res.records, card)
    return card


def filter_dataset(src_dir: str | Path, out_dir: str | Path, options: FilterOptions, *,
                   task_set: TaskSet | None = None, reward_of: RewardOf | None = None,
                   notes: Sequence[str] = ()) -> DatasetCard:
    out = Path(out_dir)
    _fresh(out)
    records, src = read_dataset(src_dir)
    kept, counts = apply_filters(records, options, instances=task_set.by_id() if task_set else None,
                                 reward_of=reward_of)
    card = make_card(out.name, src.sources, kept, n_imported=src.n_imported, filters=[*src.filters, *counts],
                     task_set=task_set.path if task_set else None,
                     task_set_sha256=task_set.sha256 if task_set else None, seed=options.seed, notes=list(notes))
    write_dataset(out, kept, card)
    return card
