"""Continue a recipe from a shipped base: a run directory that starts where a restart phase begins.

A restart phase (``repro.pretrain.schema.Restart``) starts from the previous phase's weights rounded to bf16 with a
fresh AdamW, so a shipped bf16 base of the phase before holds all it needs. ``seed_from_base(base, cfg, out)``
checks that the base is intact (``ship.verify_base``) and that it is that phase's start — its recipe is the recipe
of the stages before the phase, and its step is where the phase begins — then writes ``out``'s config, tokenizer
and a checkpoint at that step (the base's weights in float32, an empty optimizer state, the tokens seen, training
time and probe scores of the base). ``tgsuite train pretrain`` then trains the rest as a run from nothing would.
"""

from __future__ import annotations

from pathlib import Path

from repro.checkpoint import latest_checkpoint, write_json_atomic
from repro.pretrain.loop import PretrainError, Setup, save_state, setup
from repro.pretrain.schema import PretrainConfig
from repro.pretrain.ship import load_base


def seed_from_base(base: str | Path, cfg: PretrainConfig, out_dir: str | Path) -> int:
    """Start ``out_dir`` from the shipped base at ``base`` (see the module docstring); returns the step it is at."""
    out = Path(out_dir)
    if latest_checkpoint(out) is not None:
        raise PretrainError(f"{out} already has checkpoints; resume it as it is (drop --from-base) or use a new --out.")
    model, tok, manifest = load_base(base)
    prefix = cfg.phase_prefix(manifest.step)
    starts = [a for a, _, r in cfg.phases() if r is not None]
    if prefix is None:
        raise PretrainError(f"{base}/manifest.json: the base is at step {manifest.step}, but this recipe opens a "
                            f"restart phase only at steps {starts or 'none'}. Fix: continue a base exported at "
                            "one of those steps, or train the recipe from nothing (drop --from-base).")
    if prefix.recipe_sha256() != manifest.recipe_sha256:
        raise PretrainError(f"{base}/manifest.json: recipe_sha256 {manifest.recipe_sha256[:12]} is not this recipe's "
                            f"stages before step {manifest.step} ({prefix.recipe_sha256()[:12]}): the base was "
                            "trained by another recipe. Fix: use the preset it was exported from, or train from "
                            "nothing (drop --from-base).")
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "config.json", cfg.model_dump_json(indent=2))
    tok.save_pretrained(out / "tokenizer")
    s: Setup = setup(cfg, out, model=model)
    s.step, s.tokens_seen, s.wall_s = manifest.step, manifest.tokens_seen, manifest.wall_s
    s.history = [manifest.probes] if manifest.probes else []
    save_state(s)
    return s.step
