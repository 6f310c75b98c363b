"""repro.sft_identifiers: made-up names for the code's own identifiers in a real expert episode, consistently."""

from __future__ import annotations

import random
import re

import pytest

from harness.agent import run_episode
from harness.interfaces import EpisodeLimits
from harness.minirepos import make_mini
from harness.policies.scripted import ScriptedExpert
from harness.runner_sandbox import TaskSandboxFactory
from harness.schema import Message, ToolCall, Trajectory
from harness.tasks import load_task_set
from repro.pretrain.words import world_words
from repro.sft_augment import package_modules, renamed_episodes, repo_slug
from repro.sft_identifiers import code_identifiers, defined_names, fresh_names, rename_identifiers


@pytest.fixture(scope="module")
def episode(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trajectory, str]:
    out = tmp_path_factory.mktemp("idents") / "tasks"
    make_mini(out, split="train", repos=1, tasks_per_repo=1, seed=5)
    ts = load_task_set(out)
    inst = ts.instances[0]
    with TaskSandboxFactory(ts, kind="local", run_id="test-idents") as fac:
        sb, _ = fac.open(inst, role="agent", attempt=0)
        with sb:
            traj = run_episode(inst, ScriptedExpert(think=True), sb, EpisodeLimits(per_exec_timeout_s=120), seed=0)
    assert traj.finished
    return traj, inst.repo


def _edit(msgs: list[Message]) -> ToolCall:
    return next(c for m in msgs for c in m.tool_calls if c.name == "edit_file")


def test_every_name_the_code_defines_is_renamed_consistently_and_the_old_line_stays_copyable(episode) -> None:
    traj, repo = episode
    pkg = repo_slug(repo).replace("-", "_")
    mods = package_modules(traj.messages, pkg)
    names = code_identifiers(traj.messages, pkg, mods)
    assert names and not set(names) & {pkg, *mods, "self", "len", "return"}
    mapping = fresh_names(traj.messages, names, random.Random(0), taken=mods)
    assert len(set(mapping.values())) == len(names) and not set(mapping.values()) & world_words()
    out = rename_identifiers(traj.messages, mapping)
    text = "\n".join(m.content for m in out)
    for old in names:  # gone as a whole identifier (attributes after a dot are left alone)
        assert not re.search(rf"(?<![A-Za-z0-9_.]){re.escape(old)}(?![A-Za-z0-9_])", text), old
    # the edit still names a line of the renamed source, and the renamed source is still Python
    call = _edit(out)
    reads = [out[i + 1].content for i, m in enumerate(out) for c in m.tool_calls
             if c.name == "read_file" and str(c.arguments["path"]).startswith(f"{pkg}/")]
    assert reads and any(call.arguments["old"] in src for src in reads)
    assert all(defined_names(src) for src in reads)  # parses, and defines the new names
    assert set().union(*(defined_names(src) for src in reads)) & set(mapping.values())
    assert call.arguments["old"] != _edit(traj.messages).arguments["old"]  # this task's faulty line names a variable
    # pytest ids follow the function names
    assert not re.search(rf"test_({'|'.join(map(re.escape, names))})_case\d", text)


def test_defined_names_skips_sources_that_do_not_parse() -> None:
    assert defined_names("def f(a, b):\n    total = a + b\n    return total\n") == {"f", "a", "b", "total"}
    assert defined_names("def broken(:\n") == set()


def _listing(msgs: list[Message]) -> str:
    return next(msgs[i + 1].content for i, m in enumerate(msgs) for c in m.tool_calls if c.name == "list_files")


def test_identifier_share_renames_that_share_and_changes_no_earlier_draw(episode) -> None:
    traj, repo = episode
    trs = [traj.model_copy(update={"instance_id": f"x-{i}"}) for i in range(60)]
    repos = {f"x-{i}": repo for i in range(60)}
    plain = renamed_episodes(trs, repos, seed=0, epoch=0, module_share=0.5)
    half = renamed_episodes(trs, repos, seed=0, epoch=0, module_share=0.5, identifier_share=0.5)
    # the repository and module names are the same draws with or without identifier renaming: same listings
    assert [_listing(a) for a in plain] == [_listing(b) for b in half]
    changed = sum(_edit(a).arguments != _edit(b).arguments for a, b in zip(plain, half, strict=True))
    assert 15 <= changed <= 45
