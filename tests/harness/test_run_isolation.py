"""``grade`` and ``tasks validate`` run as safely as ``eval`` (issue #38 items 4, 5, 7, 8, 10): unique run ids and
container labels, SIGTERM/SIGINT leave no container or volume, ``--out`` refuses anything but a run of the same
kind, seeds and arm names are checked before any work, a non-UTF-8 predictions file names its line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.run_control import check_out_dir
from tests.harness_fakes import CALC_FIXED, FakeFactory, diff_of, make_calc_task

ROOT = Path(__file__).resolve().parents[2]


def _cli(*argv: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "tgsuite", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from harness.minirepos import make_mini

    out = tmp_path_factory.mktemp("iso") / "tasks"
    make_mini(out, split="heldout", repos=1, tasks_per_repo=2, seed=11)
    return out


def _gold_predictions(tasks: Path, path: Path) -> Path:
    lines = [json.dumps({"instance_id": t["instance_id"], "model_name_or_path": "gold", "model_patch": t["patch"]})
             for t in map(json.loads, (tasks / "tasks.jsonl").read_text().splitlines())]
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------- --out (item 7), seeds and ids (items 8, 10)


def test_out_dir_rules(tmp_path: Path) -> None:
    check_out_dir(tmp_path / "new", "eval")  # missing: fine
    (tmp_path / "empty").mkdir()
    check_out_dir(tmp_path / "empty", "grade")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        check_out_dir(tmp_path / "file", "eval")
    user = tmp_path / "user"
    user.mkdir()
    (user / "results.jsonl").write_text("my own results\n")
    with pytest.raises(ValueError, match="no manifest.json.*nothing there is overwritten"):
        check_out_dir(user, "grade")
    (user / "results.jsonl").unlink()
    (user / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="files that are not a tgsuite run"):
        check_out_dir(user, "eval")
    tasks = tmp_path / "tasks"
    (tasks / "snapshots").mkdir(parents=True)
    for out in (tasks, tasks / "snapshots" / "x"):
        with pytest.raises(ValueError, match="task set folder"):
            check_out_dir(out, "eval", tasks)


def test_eval_and_grade_runs_are_not_mixed(tmp_path: Path) -> None:
    from harness.predictions import grade_predictions
    from harness.schema import Prediction, TaskSet

    inst, repo = make_calc_task(tmp_path / "repos")
    ts = TaskSet(name="calc", path=str(tmp_path / "repos"), sha256="f" * 64, instances=[inst])
    pred = Prediction(instance_id=inst.instance_id, model_name_or_path="m", model_patch=diff_of(repo, {"calc.py": CALC_FIXED}))
    fac = FakeFactory({inst.instance_id: repo})
    a = grade_predictions(ts, [pred], tmp_path / "x" / "run", sandbox_factory=fac)
    b = grade_predictions(ts, [pred], tmp_path / "y" / "run", sandbox_factory=fac)
    assert a[0].resolved and b[0].resolved
    assert a[0].run_id != b[0].run_id and a[0].run_id.startswith("run-")  # same folder name, two run ids
    again = grade_predictions(ts, [pred], tmp_path / "x" / "run", sandbox_factory=fac)
    assert again[0].run_id == a[0].run_id  # a resume keeps it
    with pytest.raises(ValueError, match="holds a `tgsuite grade` run"):
        check_out_dir(tmp_path / "x" / "run", "eval")
    (tmp_path / "x" / "run" / "manifest.json").unlink()  # a deleted manifest: never adopted under a new run id
    with pytest.raises(ValueError, match="no manifest.json"):
        grade_predictions(ts, [pred], tmp_path / "x" / "run", sandbox_factory=fac)


def test_negative_seed_is_refused_before_any_work(tmp_path: Path) -> None:
    from harness.runner import run_eval
    from harness.schema import TaskSet
    from tests.harness_fakes import FixPolicy

    inst, repo = make_calc_task(tmp_path / "repos")
    ts = TaskSet(name="calc", path=str(tmp_path / "repos"), sha256="f" * 64, instances=[inst])
    with pytest.raises(ValueError, match=r"each must be an integer >= 0"):
        run_eval(ts, {"fix": FixPolicy()}, [-1], tmp_path / "run", sandbox_factory=FakeFactory({inst.instance_id: repo}))
    assert not (tmp_path / "run").exists()
    code, text = _cli("eval", "--tasks", str(tmp_path / "repos"), "--policy", "null", "--seeds", "-1",
                      "--out", str(tmp_path / "run"))
    assert code == 2 and "--seeds '-1' must name at least one seed >= 0" in text, text


def test_grade_cli_bad_inputs_are_named(mini: Path, tmp_path: Path) -> None:
    preds = _gold_predictions(mini, tmp_path / "preds.jsonl")
    (tmp_path / "afile").write_text("x")
    code, text = _cli("grade", "--tasks", str(mini), "--predictions", str(preds), "--out", str(tmp_path / "afile"))
    assert code == 2 and "is a file, not a folder" in text and "Traceback" not in text, text
    code, text = _cli("grade", "--tasks", str(mini), "--predictions", str(preds), "--out", str(mini))
    assert code == 2 and "task set folder" in text, text
    code, text = _cli("grade", "--tasks", str(mini), "--predictions", str(preds), "--out", str(tmp_path / "r"),
                      "--arm", "my/arm")
    assert code == 2 and "--arm" in text and "no '/'" in text, text
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(preds.read_bytes() + b'{"instance_id": "caf\xe9"}\n')
    code, text = _cli("grade", "--tasks", str(mini), "--predictions", str(bad), "--out", str(tmp_path / "r"))
    n = len(preds.read_text().splitlines()) + 1
    assert code == 2 and f"latin1.jsonl:{n}: not UTF-8" in text and "fix:" in text, text
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------- Docker: signals and cleanup (items 4, 5)


def _labelled(client: Any, prefix: str) -> tuple[list[dict], list[dict]]:
    """(containers, volumes) whose tgsuite.run_id label starts with ``prefix``."""
    cons = [c for c in client.api.containers(all=True, filters={"label": "tgsuite.run_id"})
            if (c.get("Labels") or {}).get("tgsuite.run_id", "").startswith(prefix)]
    vols = [v for v in (client.api.volumes(filters={"label": "tgsuite.run_id"}).get("Volumes") or [])
            if (v.get("Labels") or {}).get("tgsuite.run_id", "").startswith(prefix)]
    return cons, vols


def _stop_mid_run(client: Any, argv: list[str], prefix: str, sig: int) -> tuple[int, float, str]:
    proc = subprocess.Popen([sys.executable, "-m", "tgsuite", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 180
    while not _labelled(client, prefix)[0] and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(0.5)
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=90)
    return proc.returncode, time.monotonic() - t0, out


@pytest.mark.docker
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_signal_to_grade_and_validate_leaves_nothing(mini: Path, tmp_path: Path, docker_client: Any,
                                                   sig: int) -> None:
    preds = _gold_predictions(mini, tmp_path / "preds.jsonl")
    out = tmp_path / f"grade-{sig}"
    code, stop_s, text = _stop_mid_run(docker_client, ["grade", "--tasks", str(mini), "--predictions", str(preds),
                                                       "--out", str(out), "--workers", "2"], out.name + "-", sig)
    left = _labelled(docker_client, out.name + "-")
    print(f"\ngrade {signal.Signals(sig).name}: exit {code} in {stop_s:.2f} s; left {len(left[0])} containers, "
          f"{len(left[1])} volumes")
    assert code == 128 + sig and "run the same command again" in text.lower(), text[-2000:]
    assert left == ([], []) and stop_s < 30
    prefix = f"validate-{mini.name}-"
    code, stop_s, text = _stop_mid_run(docker_client, ["tasks", "validate", str(mini), "--runs", "2"], prefix, sig)
    time.sleep(0.5)
    left = _labelled(docker_client, prefix)
    print(f"validate {signal.Signals(sig).name}: exit {code} in {stop_s:.2f} s; left {len(left[0])} containers, "
          f"{len(left[1])} volumes")
    assert code == 128 + sig and "no validation.json written" in text, text[-2000:]
    assert left == ([], []) and stop_s < 30
    code, text = _cli("grade", "--tasks", str(mini), "--predictions", str(preds), "--out", str(out))
    assert code == 0 and "resolved 2" in text, text[-2000:]


def test_episodes_file_and_non_utf8_toml_are_named(tmp_path: Path) -> None:
    from protocols.load import ProtocolError, read_toml
    from repro.config import ConfigError, load_saved

    run = tmp_path / "run"
    run.mkdir()
    (run / "episodes").write_text("not a folder")
    with pytest.raises(ValueError, match="episodes is a file, where a run keeps a folder; fix"):
        check_out_dir(run, "eval")
    bad = tmp_path / "plan.toml"
    bad.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(ProtocolError, match=r"plan.toml: not UTF-8 \(byte 0xe9 at offset 11\); fix: save"):
        read_toml(bad, what="plan", example="protocols/plans/mini.toml")
    with pytest.raises(ConfigError, match=r"plan.toml: not UTF-8 .*fix: save"):
        load_saved(bad)


def test_arm_name_with_a_slash_is_named_at_parse_time() -> None:
    from tgsuite.commands.common import CLIError
    from tgsuite.commands.eval import parse_arms

    with pytest.raises(CLIError, match=r"arm name 'my/arm' has a '/'.*fix: e.g. --policy my-arm=oracle"):
        parse_arms(["my/arm=oracle"])
    assert parse_arms(["hf:ckpt/step_1"]) == {"hf-step_1": "hf:ckpt/step_1"}


def test_quoted_number_in_a_training_config_is_named() -> None:
    from repro.config import ConfigError, build_config

    with pytest.raises(ConfigError, match=r"x.toml: field `guidance.lam`: .*written without quotes \(e.g. 0.3\)"):
        build_config({"guidance": {"lam": "0.3"}}, "x.toml")
    assert build_config({"guidance": {"lam": 1}}, "x.toml").guidance.lam == 1.0
