"""SFT data augmentation for the mini task family: a fresh repository name per episode and epoch.

Why. Every mini repository is ``org/adjective-noun`` with the package ``adjective_noun``; an agent must read that
name from its context (the problem statement, the file listing) and copy it into every path it reads or edits.
Trained on a few hundred expert episodes, a from-scratch model memorises the training names instead: on held-out
repositories it wrote paths like ``bold_meadow/units.py`` for a repository whose listing said ``jolly_ember``
(docs/RESULTS.md, "Runs at 2bec4a7 and before"). Renaming the repository in every episode, anew each epoch, makes the name
impossible to memorise: the only way to predict it is to copy it from the context.

What is renamed. The slug (``bold-meadow``) and the package (``bold_meadow``) everywhere in the conversation —
system prompt, problem statement, tool results, assistant text and tool-call arguments — as whole identifiers
(a name followed by a letter, digit or ``_`` is left alone). The organisation is kept. New names come from the
generator's own word lists and its TRAIN half of the name space (``render.repo_name``), so a renamed episode never
carries a held-out repository's full name. Sampled token ids and log-probs are dropped from renamed messages (they
encode the old text); expert episodes have none.

Modules too (``module_share``). The train split has ten module templates (``ledger``, ``units``, ...); an SFT model
learns their paths by heart and, on a held-out repository with a module it never saw (``parking``), wrote
``sturdy_quill/to.py`` instead of copying ``parking`` from ``tests/test_parking.py``. In a share of episodes
(drawn per episode and epoch) every module of the package gets a made-up word (``repro.pretrain.words``, training
pool: never a mini-world identifier, so never a held-out template's name) as a whole identifier and in
``test_<module>``; a word that already occurs in the episode is never drawn, so no two names merge.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from harness.minirepos import render
from harness.schema import Message, Trajectory
from repro.sft_identifiers import code_identifiers, fresh_names, rename_identifiers
from repro.sft_rewrite import rewrite_messages


class RenameError(ValueError):
    """An episode's repository name does not occur in its conversation (not a mini-family task)."""


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])")


def _module_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_-]){re.escape(name)}(?![A-Za-z0-9_-])")


def rename_messages(messages: Sequence[Message], old_slug: str, new_slug: str,
                    modules: dict[str, str] | None = None) -> list[Message]:
    """``messages`` with the repository slug and its package name (``-`` → ``_``) replaced by the new ones, and each
    module ``old → new`` of ``modules`` renamed as a whole identifier and as ``test_<old>``."""
    pairs = [(_pattern(old_slug), new_slug), (_pattern(old_slug.replace("-", "_")), new_slug.replace("-", "_"))]
    for old_mod, new_mod in (modules or {}).items():  # not inside a slug: `ledger` is also a repository noun
        pairs += [(_module_pattern(old_mod), new_mod), (_module_pattern(f"test_{old_mod}"), f"test_{new_mod}")]

    def sub(text: str) -> str:
        for pat, new in pairs:
            text = pat.sub(new, text)
        return text

    return rewrite_messages(messages, sub)


def repo_slug(repo: str) -> str:
    """``org/adjective-noun[-n]`` → ``adjective-noun[-n]``."""
    return repo.split("/", 1)[1] if "/" in repo else repo


def package_modules(messages: Sequence[Message], package: str) -> list[str]:
    """The modules ``<package>/<name>.py`` named anywhere in the conversation (``__init__`` excluded), sorted."""
    pat = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(package)}/([A-Za-z_][A-Za-z0-9_]*)\.py")
    found = {m.group(1) for msg in messages for m in pat.finditer(msg.content)}
    return sorted(found - {"__init__"})


def fresh_module_names(messages: Sequence[Message], modules: Sequence[str], rng: random.Random) -> dict[str, str]:
    """A made-up training-pool word per module, none occurring in the conversation nor drawn twice."""
    return fresh_names(messages, modules, rng)


def renamed_episodes(trajs: Sequence[Trajectory], repos: dict[str, str], *, seed: int, epoch: int,
                     module_share: float = 0.0, identifier_share: float = 0.0) -> list[list[Message]]:
    """One renamed message list per trajectory for ``epoch``: trajectory i gets a fresh train-split name drawn from
    ``random.Random(f"sft-rename:{seed}:{epoch}:{i}")``. ``repos`` maps instance_id → ``TaskInstance.repo``. With
    probability ``module_share`` (same generator) its modules get made-up names too (``fresh_module_names``); with
    probability ``identifier_share`` (a generator of its own, ``sft-idents:{seed}:{epoch}:{i}``, so no earlier draw
    changes) the names its code defines too (``repro.sft_identifiers``)."""
    out = []
    for i, tr in enumerate(trajs):
        if tr.instance_id not in repos:
            raise RenameError(f"trajectory {i} ({tr.instance_id!r}) has no task record; rename_repos needs the task "
                              "set the expert ran on")
        old = repo_slug(repos[tr.instance_id])
        pkg = old.replace("-", "_")
        if not any(_pattern(pkg).search(m.content) for m in tr.messages):
            raise RenameError(f"instance {tr.instance_id!r}: the package name {pkg!r} never occurs in its "
                              "conversation, so renaming would change nothing; rename_repos is for the mini task "
                              "family (`tgsuite tasks make-mini`) — set it to false for other task sets")
        rng = random.Random(f"sft-rename:{seed}:{epoch}:{i}")
        new = repo_slug(render.repo_name(rng, "train", set()))
        modules = None
        if module_share > 0 and rng.random() < module_share:
            modules = fresh_module_names(tr.messages, package_modules(tr.messages, pkg), rng)
        msgs = rename_messages(tr.messages, old, new, modules)
        ident = random.Random(f"sft-idents:{seed}:{epoch}:{i}")
        if identifier_share > 0 and ident.random() < identifier_share:
            new_pkg = new.replace("-", "_")
            mods = package_modules(msgs, new_pkg)
            names = code_identifiers(msgs, new_pkg, mods)
            msgs = rename_identifiers(msgs, fresh_names(msgs, names, ident, taken=mods))
        out.append(msgs)
    return out
