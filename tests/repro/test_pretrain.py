"""Pretraining (repro.pretrain): data, probes, the corpus boundary with the held-out split, exact resume."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from repro.pretrain import words
from repro.pretrain.encode import encode_doc
from repro.pretrain.loop import PretrainError, lr_at, run_pretrain, setup, train
from repro.pretrain.mixture import step_batch
from repro.pretrain.presets import preset
from repro.pretrain.synthetic import episode_doc, make_doc
from repro.tokenizer import ChatEncoder, train_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def enc() -> ChatEncoder:
    rng = random.Random(0)
    texts = [str(make_doc(k, rng, "train", lo_id=0, hi_id=1).messages) for k in ("episode", "kv", "line") * 20]
    return ChatEncoder(train_tokenizer(texts, vocab_size=700))


def test_word_pools_are_disjoint_and_never_world_words() -> None:
    rng = random.Random(3)
    train = {words.make_word(rng, "train") for _ in range(300)}
    probe = {words.make_word(rng, "probe") for _ in range(300)}
    assert not train & probe
    assert not (train | probe | set(words.known_pool())) & words.world_words()
    assert all(words.pool_of(w) == "train" for w in words.known_pool())
    assert {"jolly", "ember", "acme"} <= words.world_words()


def test_probe_spans_are_the_copied_strings(enc: ChatEncoder) -> None:
    doc = episode_doc(random.Random(5), "probe")
    e = encode_doc(enc, doc)
    path = json.loads(doc.messages[4]["content"].split("\n")[1])["arguments"]["path"]
    old = json.loads(doc.messages[6]["content"].split("\n")[1])["arguments"]["old"]
    (a, b), (c, d) = e.spans["path"], e.spans["old"]
    assert enc.tok.decode(e.ids[a:b]).strip('"') == path
    assert old in enc.tok.decode(e.ids[c:d])
    assert all(e.act[i] == 1 for i in (*range(a, b), *range(c, d)))  # both spans are assistant (trained) tokens
    assert path in doc.messages[3]["content"]                 # the path is in the listing: copying suffices


def test_step_batches_are_pure_functions_of_the_step(enc: ChatEncoder) -> None:
    cfg = preset("nano")
    one, again, other = step_batch(cfg, 2, enc, None), step_batch(cfg, 2, enc, None), step_batch(cfg, 3, enc, None)
    assert [d.ids for d in one.docs] == [d.ids for d in again.docs]
    assert [d.ids for d in one.docs] != [d.ids for d in other.docs]
    n = sum(len(d.ids) for d in one.docs)
    assert cfg.batch_tokens <= n < cfg.batch_tokens + cfg.max_doc_len
    with pytest.raises(RuntimeError, match="world"):
        step_batch(cfg, 4, enc, None)


def test_learning_rate_schedule() -> None:
    cfg = preset("nano")
    lrs = [lr_at(cfg, s) for s in range(cfg.total_steps)]
    assert lrs[0] == pytest.approx(cfg.lr / cfg.warmup_steps)
    assert max(lrs) == pytest.approx(cfg.lr)
    assert lrs[-1] == pytest.approx(cfg.lr * cfg.min_lr_ratio)


def _heldout_names() -> set[str]:
    from harness.minirepos import render
    from harness.minirepos.templates import templates_for

    names: set[str] = set()
    for t in templates_for("unseen"):
        names |= {t.module, *t.function_names()}
    for part in render.name_parts():
        for other in render.name_parts():
            full = f"acme-labs/{part}-{other}"
            if render.split_of(full) == "heldout":
                names.add(f"{part}_{other}")
    return names


def test_no_heldout_name_reaches_the_pretraining_corpus(tmp_path: Path) -> None:
    """Stage A and stage B documents never contain an unseen-template module or function name, nor any mini-world
    package name (``adjective_noun``: every held-out package is one), though they do contain train-template code."""
    from harness.minirepos import render

    cfg = preset("nano")
    s = setup(cfg, tmp_path)
    from repro.pretrain.world import world_sampler

    world = world_sampler(cfg.world, tmp_path / "world", s.enc)
    texts = [s.tok.decode(d.ids) for step in range(cfg.total_steps) for d in step_batch(cfg, step, s.enc, world).docs]
    rng = random.Random(0)
    texts += [s.tok.decode(world(rng).ids) for _ in range(40)]
    unseen = _heldout_names()
    idents = {m for t in texts for m in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", t)}
    assert not idents & unseen, sorted(idents & unseen)
    parts = set(render.name_parts())
    world_pkgs = {m for m in idents if len(m.split("_")) == 2 and set(m.split("_")) <= parts}
    assert not world_pkgs, sorted(world_pkgs)[:5]
    assert any("def " in t and "<tool_response>" in t for t in texts), "world episodes are in the corpus"


def test_resume_is_exact(tmp_path: Path) -> None:
    cfg = preset("nano").model_copy(update={"stages": preset("nano").stages[:2]})
    straight = run_pretrain(cfg, tmp_path / "a")
    train(setup(cfg, tmp_path / "b"), max_steps=2)
    resumed = run_pretrain(cfg, tmp_path / "b")
    assert straight.step == resumed.step == cfg.total_steps
    from safetensors.torch import load_file

    wa = load_file(tmp_path / "a" / "checkpoints" / f"step_{cfg.total_steps}" / "model.safetensors")
    wb = load_file(tmp_path / "b" / "checkpoints" / f"step_{cfg.total_steps}" / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert all(v.dtype == torch.float32 for v in wa.values())
    la = [json.loads(x)["loss"] for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    lb = [json.loads(x)["loss"] for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert la == lb
    assert [p.step for p in straight.probes] == [p.step for p in resumed.probes]


def test_another_recipe_in_the_same_directory_is_refused(tmp_path: Path) -> None:
    cfg = preset("nano").model_copy(update={"stages": preset("nano").stages[:1]})
    run_pretrain(cfg, tmp_path, max_steps=1)
    with pytest.raises(PretrainError, match="another recipe"):
        setup(cfg.model_copy(update={"lr": 1e-3}), tmp_path)


def test_cli_pretrain_runs_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tgsuite.cli import main

    out = tmp_path / "pt"
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(out), "--max-steps", "2"]) == 0
    assert "step 2 of 6" in capsys.readouterr().out
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "done: step 6 of 6" in text and "probes at step 6" in text
    assert main(["train", "pretrain", "--preset", "nope", "--out", str(out)]) == 2


def test_export_and_resume_from_a_state_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run exported after 2 steps and continued elsewhere ends with the weights of an uninterrupted run."""
    from safetensors.torch import load_file

    from tgsuite.cli import main

    a, b, state = tmp_path / "a", tmp_path / "b", tmp_path / "state"
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(a), "--max-steps", "2"]) == 0
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(a), "--export-resume", str(state)]) == 0
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(b), "--resume-from", str(state)]) == 0
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(a)]) == 0
    wa = load_file(a / "checkpoints" / "step_6" / "model.safetensors")
    wb = load_file(b / "checkpoints" / "step_6" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    capsys.readouterr()
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(b), "--resume-from", str(state)]) == 2
    assert "already has checkpoints" in capsys.readouterr().err
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(tmp_path / "c"), "--resume-from",
                 str(tmp_path)]) == 2


def test_shipped_base_is_bf16_with_a_manifest_and_refuses_altered_files(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """export-base writes bf16 weights + tokenizer + manifest (recipe, tokens, probes, sha256 per file); load_base
    returns the same weights in float32 and refuses a base whose files were altered, naming the file."""
    from safetensors.torch import load_file

    from repro.pretrain.ship import BaseIntegrityError, load_base, verify_base
    from tgsuite.cli import main

    run, base = tmp_path / "run", tmp_path / "base"
    cfg = preset("nano").model_copy(update={"stages": preset("nano").stages[:1]})
    run_pretrain(cfg, run)
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(run), "--export-base", str(base)]) == 0
    assert "exported base" in capsys.readouterr().out
    m = verify_base(base)
    assert m.step == cfg.total_steps and m.recipe_sha256 == cfg.recipe_sha256() and m.probes is not None
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= set(m.files)
    w = load_file(base / "model.safetensors")
    assert all(v.dtype == torch.bfloat16 for v in w.values())
    model, tok, _ = load_base(base)
    master = load_file(run / "checkpoints" / f"step_{cfg.total_steps}" / "model.safetensors")
    got = dict(model.named_parameters())
    assert all(torch.equal(got[k].detach(), master[k].to(torch.bfloat16).float()) for k in master if k in got)
    assert len(tok) == len(load_tokenizer_of(run))
    with (base / "tokenizer.json").open("a") as f:
        f.write(" ")
    with pytest.raises(BaseIntegrityError, match=r"tokenizer\.json: sha256 differs"):
        load_base(base)
    (base / "manifest.json").unlink()
    with pytest.raises(BaseIntegrityError, match="not a shipped base"):
        verify_base(base)


def load_tokenizer_of(run: Path):
    from repro.tokenizer import load_tokenizer

    return load_tokenizer(run / "tokenizer")


def test_sft_starts_from_a_verified_base_and_names_a_missing_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """`init = "base:<name>"` resolves to assets/base/<name>/; SFT loads it only after the sha256 check, and the
    reproduce stage's cache key carries the manifest's hash (a new base re-runs SFT)."""
    from repro.pretrain import ship
    from repro.sft import SFTConfig, _model_and_tokenizer
    from tgsuite.cli import main

    run, bases = tmp_path / "run", tmp_path / "bases"
    cfg = preset("nano").model_copy(update={"stages": preset("nano").stages[:1]})
    run_pretrain(cfg, run)
    assert main(["train", "pretrain", "--preset", "nano", "--out", str(run), "--export-base",
                 str(bases / "nano")]) == 0
    monkeypatch.setattr(ship, "BASES_DIR", bases)
    assert ship.resolve_init("base:nano") == bases / "nano" and ship.resolve_init("x/y") == Path("x/y")
    with pytest.raises(ship.BaseIntegrityError, match=r"base:mini.*shipped: \['nano'\].*--export-base"):
        ship.resolve_init("base:mini")
    fp = ship.init_fingerprint("base:nano")
    assert set(fp) == {"base_manifest"} and ship.init_fingerprint(None) == {} == ship.init_fingerprint(str(run))
    sft = SFTConfig(train_tasks="unused", init="base:nano")
    model, tok = _model_and_tokenizer(sft, [], [])
    assert all(p.dtype == torch.float32 for p in model.parameters()) and len(tok) == len(load_tokenizer_of(run))
    with (bases / "nano" / "model.safetensors").open("ab") as f:
        f.write(b"\0")
    with pytest.raises(ship.BaseIntegrityError, match=r"model\.safetensors: sha256 differs"):
        _model_and_tokenizer(sft, [], [])
