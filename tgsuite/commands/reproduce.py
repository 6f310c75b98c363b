"""``tgsuite reproduce``: the mini reproduction end to end (see ``tgsuite.pipeline.reproduce``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tgsuite.commands.common import CLIError

EPILOG = """\
examples:
  tgsuite reproduce --preset smoke --out runs/smoke     # every stage, tiny sizes, a few minutes (the default preset)
  tgsuite reproduce --preset mini --out runs/mini       # the reproduction (arms grpo and tg, 5 seeds each;
                                                        # about 40 minutes on 2 cores)
  tgsuite reproduce --preset mini --out runs/mini --force eval_arms   # re-run one stage (and what depends on it)
  tgsuite reproduce --preset mini --out runs/mini --studies all       # add every exploratory study to the report
                                                                      # (hours on 2 cores; never part of the decision)

Re-running the same command resumes: stages whose inputs are unchanged are skipped. The verdict and the path of
the HTML report are printed at the end; per-stage times are in OUT/pipeline.json.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("reproduce", help="run the mini reproduction end to end, ending in an HTML report",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=["smoke", "mini"], default="smoke", help="sizes of every stage")
    p.add_argument("--out", required=True, help="output directory (created; re-use it to resume)")
    p.add_argument("--force", action="append", default=[], metavar="STAGE",
                   help="re-run this stage even if it is up to date (repeatable; 'all' for every stage)")
    p.add_argument("--studies", default="none", metavar="LIST",
                   help="exploratory studies to add: 'none' (default), 'all', or a comma list of "
                        "noisy_feedback,can_do,equal_compute,ablations,production_loop,hint_probes,behaviour_tiers "
                        "(they add training runs and evaluations)")
    p.add_argument("--rebuild-sft", action="store_true",
                   help="train the SFT model inside the run (the preset's sft recipe) instead of starting RL from the "
                        "shipped SFT coder (mini: assets/sft/mini)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tgsuite.pipeline.presets import PRESETS
    from tgsuite.pipeline.reproduce import reproduce

    preset = PRESETS.get(args.preset)
    if preset is None:
        raise CLIError(f"unknown preset {args.preset!r}; choose one of {sorted(PRESETS)}")
    if args.rebuild_sft:
        preset = preset.model_copy(update={"sft_start": None})
    from tgsuite.pipeline.studies import parse_studies

    try:
        studies = frozenset(parse_studies(args.studies))
    except ValueError as exc:
        raise CLIError(f"--studies {args.studies!r}: {exc}") from exc
    from repro.pretrain.ship import BaseIntegrityError

    try:
        record = reproduce(preset, args.out, force=frozenset(args.force), studies=studies)
    except BaseIntegrityError as exc:  # a shipped base or SFT coder missing or altered: the message says the fix
        raise CLIError(str(exc)) from exc
    print(json.dumps({"decision": record["decision"], "report": record["report"],
                      "stages_s": {k: v["wall_s"] for k, v in record["stages"].items()}}, indent=2))
    print(f"\nVerdict: {record['decision']}. Open the report: {record['report']}")
    return 0
