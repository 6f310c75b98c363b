"""Stage B's documents: the mini world's own text, from the TRAIN split only.

Built once per run directory (``world/``): a train-split task set (``harness.minirepos.make_mini``, split
``train``), ``ScriptedExpert`` episodes on it (``repro.sft.collect_expert_trajectories``: LocalSandbox, the real
agent loop and tools; half with ``<think>`` blocks), cached in ``world/episodes.jsonl`` under a key that includes
the tool schemas, so a change of the agent's format rebuilds the corpus. Each draw is either

- an expert episode (share ``1 - code_share``) whose repository is renamed to a fresh name made of training-pool
  words (``repro.pretrain.words``; ``repro.sft_augment.rename_messages`` replaces slug and package everywhere),
  rendered with the tool schemas, loss on every token (the observations are the world's code and test output).
  Made-up names, not the world's own ``adjective_noun`` ones: the mini world splits repositories by their full
  ``org/name``, so a held-out repository's package (``amber_prism``) also exists under another organisation in
  the train half; renaming to words the world never uses keeps every held-out package out of this corpus; or
- a module of a TRAIN template rendered with fresh constants (plain text, loss on every token).

The expert reads whole test files here (``WorldCorpus.test_view="read"``, the view the shipped base was pretrained
on); ``"search"`` (grep the test file for the function's calls, ``harness.policies.expert_test_view``) is the shorter
view that SFT can also use (``SFTConfig.test_view``).

Nothing here reads the held-out split or the unseen templates; ``tests`` check that no held-out repository name,
unseen-template module or function name reaches this corpus.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from pathlib import Path

from repro.pretrain.encode import EncodedDoc
from repro.pretrain.mixture import WorldSampler
from repro.pretrain.schema import WorldCorpus
from repro.tokenizer import ChatEncoder

log = logging.getLogger(__name__)
CODE_SHARE = 0.2


def _key(cfg: WorldCorpus, tools: list) -> str:
    blob = json.dumps({"world": cfg.recipe_dump(), "tools": tools}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def world_episodes(cfg: WorldCorpus, root: Path) -> tuple[list, dict[str, str]]:
    """(expert trajectories, instance_id → repo) on a train-split task set under ``root`` (cached)."""
    from harness.minirepos import make_mini
    from harness.schema import Trajectory
    from harness.tasks import load_task_set
    from harness.tools import tool_schemas
    from repro.sft import collect_expert_trajectories

    root.mkdir(parents=True, exist_ok=True)
    key = _key(cfg, tool_schemas())
    tasks, cache = root / "tasks", root / "episodes.jsonl"
    if not (tasks / "tasks.jsonl").is_file():
        make_mini(tasks, split="train", repos=cfg.repos, tasks_per_repo=cfg.tasks_per_repo, seed=cfg.seed,
                  overwrite=True)
    repos = {i.instance_id: i.repo for i in load_task_set(tasks).instances}
    if cache.is_file():
        lines = cache.read_text().splitlines()
        if lines and lines[0] == key:
            return [Trajectory.model_validate_json(x) for x in lines[1:]], repos
    half = cfg.episodes // 2
    trajs = []
    for think, n, s in ((False, cfg.episodes - half, cfg.seed), (True, half, cfg.seed + 1)):
        if n:
            trajs += collect_expert_trajectories(tasks, episodes=n, hint_share=cfg.hint_share, think=think, seed=s,
                                                 test_view=cfg.test_view)
    cache.write_text("\n".join([key] + [t.model_dump_json() for t in trajs]) + "\n")
    log.info("world corpus: %d expert episodes on %d train repositories", len(trajs), len(set(repos.values())))
    return trajs, repos


def train_module(rng: random.Random) -> str:
    """A TRAIN-pool template module with constants drawn from its parameter lists."""
    from harness.minirepos.templates import templates_for

    tpl = rng.choice(templates_for("train"))
    return tpl.render({k: rng.choice(v) for k, v in sorted(tpl.params.items())})


def world_sampler(cfg: WorldCorpus, root: Path, enc: ChatEncoder) -> WorldSampler:
    """A ``rng -> EncodedDoc`` sampler over the world corpus (built or loaded under ``root``)."""
    from harness.tools import tool_schemas

    trajs, repos = world_episodes(cfg, root)
    if not trajs:
        raise RuntimeError(f"{root}: the expert finished no episode on the world task set; check it with "
                           "`tgsuite tasks validate`.")
    tools = tool_schemas()

    def sample(rng: random.Random) -> EncodedDoc:
        if rng.random() < CODE_SHARE:
            ids = enc.text_ids(train_module(rng))
            return EncodedDoc(ids, [1] * len(ids), {})
        e = enc.encode(renamed_episode(rng, trajs, repos), tools)
        return EncodedDoc(list(e.ids), [1] * len(e.ids), {})

    return sample


def renamed_episode(rng: random.Random, trajs: list, repos: dict[str, str]) -> list:
    """One expert episode (drawn by ``rng``) with its repository renamed to made-up training-pool words."""
    from repro.pretrain.words import draw
    from repro.sft_augment import rename_messages, repo_slug

    tr = trajs[rng.randrange(len(trajs))]
    new = f"{draw(rng, 'train')}-{draw(rng, 'train')}"
    return rename_messages(tr.messages, repo_slug(repos[tr.instance_id]), new)


def sample_texts(cfg: WorldCorpus, root: Path, n: int, *, seed: int) -> list[str]:
    """``n`` world texts for tokenizer training: renamed episodes (with tool schemas) and ``n`` template modules."""
    from harness.tools import tool_schemas
    from repro.tokenizer import train_tokenizer

    trajs, repos = world_episodes(cfg, root)
    probe = train_tokenizer([json.dumps(tool_schemas())], vocab_size=300, min_frequency=1)
    rng = random.Random(f"world-text:{seed}")
    texts = [probe.apply_chat_template([m.model_dump() for m in renamed_episode(rng, trajs, repos)],
                                       tools=tool_schemas(), tokenize=False) for _ in range(n)]
    return texts + [train_module(rng) for _ in range(n)]
