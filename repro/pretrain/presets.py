"""Named pretraining recipes: ``mini`` (the shipped base) and ``nano`` (tests; seconds on one core).

The ``mini`` curriculum follows what was measured on this machine before it was written (issue #20): the same
copy-weighted mix from scratch learnt nothing in 2.6M tokens, while structured episodes first (names from a small
known pool) and copy-heavy data second reached exact copy of unseen-word paths. Stage sizes: A1 ≈ 2.5M tokens,
A2 ≈ 16M, B ≈ 16M, B2 ≈ 8M (batches of 16,384 tokens). B2 opens a restart phase (``schema.Restart``): it was added
after A1–B had been trained and shipped (their exact-``old``-line probe ended at 0.844), and continues from that
bf16 export with a fresh AdamW, a lower peak lr and a long decay, on a mix with more synthetic episodes — the same
run as going through the phase boundary from nothing (``repro.pretrain.from_base``).
"""

from __future__ import annotations

from repro.pretrain.schema import PretrainConfig, Restart, Stage, WorldCorpus

PRESETS: dict[str, PretrainConfig] = {
    "mini": PretrainConfig(
        model="mini", stages=(
            Stage(name="A1", steps=150, mix={"episode_known": 1.0}),
            Stage(name="A2", steps=1000, mix={"repeat": 0.45, "kv": 0.2, "line": 0.1, "episode": 0.25}),
            Stage(name="B", steps=1000, mix={"world": 0.6, "repeat": 0.15, "kv": 0.05, "line": 0.05, "episode": 0.15}),
            Stage(name="B2", steps=480, mix={"world": 0.35, "episode": 0.45, "line": 0.05, "repeat": 0.1, "kv": 0.05},
                  restart=Restart(lr=6e-4, warmup_steps=20, decay_frac=0.6)),
        )),
    "nano": PretrainConfig(
        model="nano", vocab_size=600, tokenizer_docs=40, batch_tokens=1024, max_doc_len=1024, warmup_steps=2,
        probe_every=3, probe_docs=6, torch_threads=1, world=WorldCorpus(repos=2, tasks_per_repo=1, episodes=3),
        stages=(
            Stage(name="A1", steps=2, mix={"episode_known": 1.0}),
            Stage(name="A2", steps=2, mix={"repeat": 0.5, "kv": 0.2, "line": 0.1, "episode": 0.2}),
            Stage(name="B", steps=2, mix={"world": 0.7, "repeat": 0.3}),
        )),
}


def preset(name: str) -> PretrainConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown pretraining preset {name!r}; choose one of {sorted(PRESETS)}.")
    return PRESETS[name]
