"""repro.sft_augment: whole-identifier renaming of a mini repository in expert episodes, fresh names per epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.minirepos import render
from harness.schema import Message, ToolCall, Trajectory
from repro.pretrain.words import world_words
from repro.sft_augment import RenameError, fresh_module_names, package_modules, rename_messages, renamed_episodes


def _msgs(pkg: str = "bold_meadow", slug: str = "bold-meadow") -> list[Message]:
    call = ToolCall(name="read_file", arguments={"path": f"{pkg}/grades.py", "n": [f"{pkg}.x", 3]}, call_id="c0",
                    raw=f'{{"name": "read_file", "arguments": {{"path": "{pkg}/grades.py"}}}}')
    return [
        Message(role="user", content=f"In `{pkg}.grades` (repo acme/{slug}) letter is wrong; also {pkg}_extra, "
                                     f"x{pkg} and {slug}-1."),
        Message(role="assistant", content=f"<tool_call>\n{call.raw}\n</tool_call>", tool_calls=[call],
                token_ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3]),
        Message(role="tool", content=f"from {pkg}.grades import letter\n", tool_name="read_file"),
    ]


def test_renames_slug_and_package_as_whole_identifiers_everywhere() -> None:
    out = rename_messages(_msgs(), "bold-meadow", "calm-fern")
    assert out[0].content == ("In `calm_fern.grades` (repo acme/calm-fern) letter is wrong; also bold_meadow_extra, "
                              "xbold_meadow and calm-fern-1.")
    call = out[1].tool_calls[0]
    assert call.arguments == {"path": "calm_fern/grades.py", "n": ["calm_fern.x", 3]}
    assert "calm_fern/grades.py" in call.raw and "calm_fern/grades.py" in out[1].content
    assert out[1].token_ids is None and out[1].logprobs is None  # they encoded the old text
    assert out[2].content == "from calm_fern.grades import letter\n" and out[2].tool_name == "read_file"
    assert rename_messages(_msgs(), "bold-meadow", "bold-meadow")[0].content == _msgs()[0].content


def test_module_renaming_reaches_paths_imports_and_test_files_but_not_slugs() -> None:
    msgs = [Message(role="user", content="acme/bold-ledger: `bold_ledger.ledger` breaks; see tests/test_ledger.py "
                                         "and ledger_total, test_ledger_x, bold_ledger/__init__.py"),
            Message(role="tool", content="bold_ledger/ledger.py\nbold_ledger/units.py\ntests/test_ledger.py",
                    tool_name="list_files")]
    assert package_modules(msgs, "bold_ledger") == ["ledger", "units"]
    out = rename_messages(msgs, "bold-ledger", "calm-fern", {"ledger": "vorlak", "units": "tesimu"})
    assert out[0].content == ("acme/calm-fern: `calm_fern.vorlak` breaks; see tests/test_vorlak.py and ledger_total, "
                              "test_ledger_x, calm_fern/__init__.py")
    assert out[1].content == "calm_fern/vorlak.py\ncalm_fern/tesimu.py\ntests/test_vorlak.py"
    # a new slug that contains a module's word keeps it (the slug and the package stay consistent)
    out = rename_messages(msgs, "bold-ledger", "calm-ledger", {"ledger": "vorlak"})
    assert out[0].content.startswith("acme/calm-ledger: `calm_ledger.vorlak`")


def test_fresh_module_names_are_new_words_never_of_the_mini_world() -> None:
    import random

    msgs = [Message(role="user", content="vorlak tesimu " * 3)]
    for seed in range(30):
        names = fresh_module_names(msgs, ["ledger", "units", "grades"], random.Random(seed))
        assert len(set(names.values())) == 3
        assert not set(names.values()) & (world_words() | {"vorlak", "tesimu"})


def test_module_share_renames_that_share_of_episodes() -> None:
    trs = [_traj(f"a-{i}", _msgs()) for i in range(200)]
    repos = {f"a-{i}": "acme/bold-meadow" for i in range(200)}
    plain = renamed_episodes(trs, repos, seed=0, epoch=0)
    assert all("/grades.py" in e[2].content or ".grades" in e[2].content for e in plain)
    half = renamed_episodes(trs, repos, seed=0, epoch=0, module_share=0.5)
    renamed = sum(".grades " not in e[2].content for e in half)
    assert 70 <= renamed <= 130
    # the repository names drawn do not depend on module_share (the module draw comes after)
    assert [e[2].content.split(".")[0] for e in plain] == [e[2].content.split(".")[0] for e in half]


def _traj(iid: str, msgs: list[Message]) -> Trajectory:
    return Trajectory(instance_id=iid, policy="expert", seed=0, messages=msgs)


def test_each_epoch_draws_fresh_train_split_names_reproducibly() -> None:
    trs = [_traj("a-1", _msgs()), _traj("a-2", _msgs())]
    repos = {"a-1": "acme/bold-meadow", "a-2": "acme/bold-meadow"}
    e0 = renamed_episodes(trs, repos, seed=0, epoch=0)
    assert e0 == renamed_episodes(trs, repos, seed=0, epoch=0)
    names = set()
    for epoch in range(6):
        for msgs in renamed_episodes(trs, repos, seed=0, epoch=epoch):
            assert "bold_meadow/grades.py" not in msgs[2].content
            pkg = msgs[2].content.split()[1].split(".")[0]
            names.add(pkg)
    assert len(names) >= 8  # 12 draws from 900 combinations
    # every drawn name is an adjective_noun of the generator's word lists
    assert all(p.split("_")[0] in render._ADJ and p.split("_")[1] in render._NOUN for p in names)


def test_a_task_set_that_is_not_mini_family_is_refused_with_the_fix() -> None:
    trs = [_traj("x-1", [Message(role="user", content="fix the parser")])]
    with pytest.raises(RenameError, match="rename_repos is for the mini task family"):
        renamed_episodes(trs, {"x-1": "acme/bold-meadow"}, seed=0, epoch=0)
    with pytest.raises(RenameError, match="no task record"):
        renamed_episodes(trs, {}, seed=0, epoch=0)


def test_run_sft_trains_on_renamed_episodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With rename_repos each epoch's examples are the same episodes under another package name."""
    import repro.sft as sft
    from harness.minirepos import make_mini

    seen = {}

    def fake_train(model, examples, cfg, metrics_path, epoch_examples=None):
        seen["plain"] = examples
        seen["epochs"] = [epoch_examples(e) for e in range(cfg.epochs)] if epoch_examples else []
        return {"steps": 0, "final_loss": 0.0, "tokens": 0, "tokens_per_s": 0.0}

    monkeypatch.setattr(sft, "sft_train", fake_train)
    make_mini(tmp_path / "train", split="train", repos=1, tasks_per_repo=2, seed=0)
    cfg = sft.SFTConfig(train_tasks=str(tmp_path / "train"), preset="nano", vocab_size=600, episodes=2,
                        hint_share=0.0, epochs=2, workers=1, torch_threads=1, rename_repos=True)
    sft.run_sft(cfg, tmp_path / "out")
    plain, (e0, e1) = seen["plain"], seen["epochs"]
    assert len(e0) == len(e1) == len(plain) == 2
    for a, b, c in zip(plain, e0, e1, strict=True):
        assert a[0] != b[0] and b[0] != c[0]  # other names, so other tokens
        assert sum(a[1]) > 0 and sum(b[1]) > 0
    sft.run_sft(cfg.model_copy(update={"rename_repos": False}), tmp_path / "out2")
    assert seen["epochs"] == []  # no augmentation: the same examples every epoch


def test_rename_modules_needs_rename_repos() -> None:
    import repro.sft as sft

    with pytest.raises(ValueError, match="set rename_repos=true as well"):
        sft.SFTConfig(train_tasks="t", rename_modules=0.5)
    assert sft.SFTConfig(train_tasks="t", rename_modules=0.5, rename_repos=True).rename_modules == 0.5
