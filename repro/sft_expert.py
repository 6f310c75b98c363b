"""Expert SFT data: ``ScriptedExpert`` episodes on the TRAIN split, run by the real agent loop in LocalSandboxes.

Used by the SFT stage (``repro.sft``), the pretraining world corpus (``repro.pretrain.world``) and the episode-token
benchmark. Hints (``hint_share``) and mistakes with their recovery (``stumble_share``, ``repro.sft_stumble``) are
drawn per episode from seeded generators of their own, so no draw changes another; so is a short turn limit with
the agent loop's finish notice (``budget_share``).
"""

from __future__ import annotations

import logging
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)


def collect_expert_trajectories(task_dir: str | Path, *, episodes: int, hint_share: float, think: bool, seed: int,
                                workers: int = 2, hint_checkers: tuple[str, ...] = ("markdown@v1",),
                                stumble_share: float = 0.0, budget_share: float = 0.0,
                                finish_notice_turns: int = 2, test_view: str = "read") -> list:
    """Run ``ScriptedExpert`` on the train split; episode i uses instance i mod n and gets a hint with
    probability ``hint_share`` (its own seeded draw): the reminder of one of ``hint_checkers`` (drawn uniformly), at
    that checker's placement; with probability ``stumble_share`` (another draw) one mistake and its recovery
    (``repro.sft_stumble``, kind drawn uniformly); with probability ``budget_share`` (a third draw) a turn limit of
    4-9 (uniform) with the agent loop's notice ``finish_notice_turns`` turns before it
    (``EpisodeLimits.finish_notice_turns``), so the notice often comes before the fix and the expert reports what it
    changed and what still fails. ``test_view``: how the expert looks at the visible tests
    (``harness.policies.expert_test_view``). Returns finished trajectories only (others are logged)."""
    from harness.agent import run_episode
    from harness.feedback import corrective_feedback
    from harness.interfaces import EpisodeLimits
    from harness.policies.scripted import ScriptedExpert
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tasks import load_task_set
    from repro.sft_stumble import KINDS, StumblingExpert

    ts = load_task_set(task_dir)
    if not ts.instances:
        raise ValueError(f"{task_dir}/tasks.jsonl has no instances; generate them with `tgsuite tasks make-mini`.")
    fbs = [corrective_feedback(c) for c in hint_checkers]
    expert = ScriptedExpert(think=think, test_view=test_view)
    fac = TaskSandboxFactory(ts, kind="local", run_id="sft-expert")

    def one(i: int):
        inst = ts.instances[i % len(ts.instances)]
        draw = random.Random(f"sft-hint:{seed}:{i}")
        hinted = draw.random() < hint_share
        fb = fbs[draw.randrange(len(fbs))]  # drawn after `hinted`, so it never changes that draw
        trip = random.Random(f"sft-stumble:{seed}:{i}")
        policy = (StumblingExpert(expert, trip.choice(KINDS), trip) if trip.random() < stumble_share else expert)
        budget = random.Random(f"sft-budget:{seed}:{i}")
        limits = (EpisodeLimits(max_turns=budget.randint(max(4, finish_notice_turns + 1), 9),
                                finish_notice_turns=finish_notice_turns)
                  if budget.random() < budget_share else EpisodeLimits())
        sb, _ = fac.open(inst, role="agent", attempt=0)
        try:
            return run_episode(inst, policy, sb, limits, feedback=fb if hinted else None, seed=seed * 100_003 + i)
        finally:
            sb.close()

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        trajs = list(pool.map(one, range(episodes)))
    fac.close()
    kept = [t for t in trajs if t.finished]
    if len(kept) < len(trajs):
        log.warning("dropped %d unfinished expert trajectories", len(trajs) - len(kept))
    return kept
