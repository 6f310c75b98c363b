"""``tgsuite tasks import-swebench``: SWE-bench records + local clones → a task set; on real PyPI packages (sdists
of six, more-itertools, idna and python-dateutil, each committed as a clone with a planted bug) it validates and
grades in Docker — idna's test command sets an environment variable its hidden test checks, more-itertools runs
under unittest as its own tox.ini does (graded from the printed log by swebench's Django parser, not by pytest),
dateutil runs in an environment image (six installed offline from wheels the host downloaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness.schema import Prediction
from harness.swebench_import import import_swebench
from harness.tasks import TaskSetError, load_task_set, materialize_snapshot
from tests.harness_fakes import diff_of, make_calc_task

ROOT = Path(__file__).resolve().parents[2]
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


def _record(inst, **extra) -> dict:
    rec = {k: v for k, v in inst.model_dump().items() if k not in ("extra", "test_cmd", "image", "behaviour",
                                                                   "cluster", "split", "difficulty",
                                                                   "template_tier", "bug_family", "visible_test_cmd",
                                                                   "test_log_parser")}
    rec["repo"] = "acme/calc"
    rec["FAIL_TO_PASS"] = json.dumps(rec["FAIL_TO_PASS"])  # as in the Hugging Face dumps
    return rec | extra


def test_import_keeps_unknown_fields_and_remaps_the_base_commit(tmp_path: Path) -> None:
    inst, repo = make_calc_task(tmp_path / "clones", "acme__calc")
    (repo / "link").symlink_to("calc.py")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "with a link")
    head = _git(repo, "rev-parse", "HEAD").strip()
    rec = _record(inst, base_commit=head, instance_id="acme__calc-1", hints_text="h", version="1.0",
                  environment_setup_commit=head, FAIL_TO_PASS_count=1, model_hint={"a": 1})
    (tmp_path / "r.jsonl").write_text(json.dumps(rec) + "\n")
    summary = import_swebench(tmp_path / "r.jsonl", tmp_path / "clones", tmp_path / "ts", env={"TGS_X": "1"})
    assert summary.instances == 1 and summary.symlinks_dropped == {"acme__calc-1": 1}
    (got,) = load_task_set(tmp_path / "ts").instances
    assert got.extra["hints_text"] == "h" and got.extra["version"] == "1.0" and got.extra["model_hint"] == {"a": 1}
    assert got.extra["FAIL_TO_PASS_count"] == 1 and got.extra["swebench_base_commit"] == head
    assert got.FAIL_TO_PASS == ["tests/test_calc.py::test_add"] and got.test_cmd == "env TGS_X=1 python -m pytest"
    assert materialize_snapshot(tmp_path / "ts", got, tmp_path / "m") == got.base_commit  # no mismatch
    assert (tmp_path / "m" / "calc.py").is_file() and not (tmp_path / "m" / "link").exists()
    assert "swebench_log_parser" not in got.extra  # swebench has no parser for acme/calc


def test_import_records_swebench_s_log_parser(tmp_path: Path) -> None:
    pytest.importorskip("swebench")
    inst, repo = make_calc_task(tmp_path / "clones", "django__django")
    rec = _record(inst, repo="django/django", instance_id="django__django-1")
    (tmp_path / "r.jsonl").write_text(json.dumps(rec) + "\n")
    import_swebench(tmp_path / "r.jsonl", tmp_path / "clones", tmp_path / "ts")
    assert load_task_set(tmp_path / "ts").instances[0].extra["swebench_log_parser"] == "parse_log_django"


def test_import_sets_the_log_parser_record_first_then_the_flag(tmp_path: Path, caplog) -> None:
    pytest.importorskip("swebench")
    inst, _ = make_calc_task(tmp_path / "clones", "django__django")
    recs = [_record(inst, repo="django/django", instance_id="dj-1"),
            _record(inst, repo="django/django", instance_id="dj-2", test_log_parser="sympy")]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    with caplog.at_level("WARNING", logger="harness.swebench_import"):
        import_swebench(tmp_path / "r.jsonl", tmp_path / "clones", tmp_path / "ts")
    assert [i.test_log_parser for i in load_task_set(tmp_path / "ts").instances] == ["junit", "sympy"]
    (warning,) = [r.getMessage() for r in caplog.records]  # only the record graded by JUnit is warned about
    assert "r.jsonl:1" in warning and "parse_log_django" in warning and "--test-log-parser django" in warning
    import_swebench(tmp_path / "r.jsonl", tmp_path / "clones", tmp_path / "ts", overwrite=True,
                    test_log_parser="django", test_cmd="python -m unittest -v")
    got = load_task_set(tmp_path / "ts").instances
    assert [i.test_log_parser for i in got] == ["django", "sympy"] and got[0].test_cmd == "python -m unittest -v"
    with pytest.raises(TaskSetError, match=r"r\.jsonl:1.*test_log_parser.*unknown parser 'nose'"):
        import_swebench(tmp_path / "r.jsonl", tmp_path / "clones", tmp_path / "ts", overwrite=True,
                        test_log_parser="nose")


def test_import_errors_name_the_record_and_the_fix(tmp_path: Path) -> None:
    inst, _ = make_calc_task(tmp_path / "clones", "acme__calc")
    cases = [(_record(inst, repo="nobody/else"), r"r\.jsonl:1: no git clone of 'nobody/else'.*fix: git clone"),
             (_record(inst, base_commit="0" * 40), "has no commit 0000.*fix: git fetch"),
             ({"repo": "acme/calc"}, "field 'instance_id' is missing"),
             (_record(inst, FAIL_TO_PASS="[not json"), "FAIL_TO_PASS")]
    for rec, msg in cases:
        (tmp_path / "r.jsonl").write_text(json.dumps(rec) + "\n")
        with pytest.raises(TaskSetError, match=msg):
            import_swebench(tmp_path / "r.jsonl", tmp_path / "clones", tmp_path / "ts", overwrite=True)



def test_unreadable_records_are_named_by_file_and_line_with_the_fix(tmp_path: Path) -> None:
    """A bad third line was reported as 'line 1 column 21' (json's line within that line), and a non-UTF-8 file as
    the bare codec error, naming neither the file nor the fix."""
    from harness.swebench_import import read_records

    cases = [(b'{"instance_id": "a"}\n\n{"instance_id": "c",}\n', r"r\.jsonl:3: not JSON .*fix: one SWE-bench record"),
             (b'{"instance_id": "a"}\n\xff\n', r"r\.jsonl:2: not UTF-8 \(byte 0xff.*fix: save the records as UTF-8"),
             (b'["x"]', r"r\.jsonl\[0\]: a record must be a JSON object, got str; fix:"),
             (b"\n", r"r\.jsonl: no records; fix:")]
    for data, msg in cases:
        (tmp_path / "r.jsonl").write_bytes(data)
        with pytest.raises(TaskSetError, match=msg):
            read_records(tmp_path / "r.jsonl")


# ---------------------------------------------------------------- real packages from PyPI sdists, graded in Docker

ENSURE_STR_OK = "    elif PY3 and isinstance(s, binary_type):\n        return s.decode(encoding, errors)\n    elif not"
# (sdist, file, correct text, planted bug, hidden test file → text, FAIL_TO_PASS, PASS_TO_PASS, env or options)
PACKAGES = [
    ("six==1.17.0", "six.py", ENSURE_STR_OK, ENSURE_STR_OK.replace("(encoding,", '("ascii",'),
     {"test_tgsuite_six.py": "import six\n\n\ndef test_ensure_str_utf8():\n"
                             "    assert six.ensure_str('\\u00e9'.encode('utf-8')) == '\\u00e9'\n"},
     ["test_tgsuite_six.py::test_ensure_str_utf8"], ["test_six.py::test_lazy"], {}),
    # run the way the project runs its own tests (tox.ini: python -m unittest -v), graded from that log with
    # swebench's Django parser: a test is named as unittest prints it, or by its docstring's first line if it has one
    ("more-itertools==10.5.0", "more_itertools/more.py", "    return sum(compress(repeat(1), zip(iterable)))\n",
     "    return sum(compress(repeat(1), zip(iterable))) - 1\n",
     {"tests/test_tgsuite_ilen.py": "from unittest import TestCase\n\nfrom more_itertools import ilen\n\n\n"
                                    "class IlenCountTests(TestCase):\n    def test_ilen_counts(self):\n"
                                    "        self.assertEqual((ilen(range(5)), ilen([])), (5, 0))\n"},
     ["test_ilen_counts (tests.test_tgsuite_ilen.IlenCountTests.test_ilen_counts)", "Sanity-checks for ``ilen()``."],
     ["test_distance (tests.test_more.AdjacentTests.test_distance)"],
     {"--test-cmd": "python -m unittest -v", "--test-log-parser": "django"}),
    ("idna==3.10", "idna/core.py", "    if len(label) > 63:\n", "    if len(label) > 64:\n",
     {"tests/test_tgsuite_env.py": "import os\n\nimport idna\n\n\ndef test_env_and_label_limit():\n"
                                   "    assert os.environ.get('TGS_IDNA_MODE') == 'strict'\n"
                                   "    assert not idna.valid_label_length('a' * 64)\n"},
     ["tests/test_idna.py::IDNATests::test_valid_label_length", "tests/test_tgsuite_env.py::test_env_and_label_limit"],
     ["tests/test_idna.py::IDNATests::test_check_hyphen_ok"], {"--env": "TGS_IDNA_MODE=strict"}),
    # a src/ layout that needs a dependency (six) the base image lacks: an environment image, built offline
    ("python-dateutil==2.9.0.post0", "src/dateutil/relativedelta.py", "        if abs(self.hours) > 23:\n",
     "        if abs(self.hours) > 24:\n",
     {"tests/test_tgsuite_rd.py": "from dateutil.relativedelta import relativedelta\n\n\n"
                                  "def test_hours_carry_into_days():\n"
                                  "    assert relativedelta(hours=24) == relativedelta(days=1)\n\n\n"
                                  "def test_months_carry_into_years():\n"
                                  "    assert relativedelta(months=13) == relativedelta(years=1, months=1)\n"},
     ["tests/test_tgsuite_rd.py::test_hours_carry_into_days"], ["tests/test_tgsuite_rd.py::test_months_carry_into_years"],
     {"--env": "PYTHONPATH=src:/opt/tgsuite-env"}),
]
ENVIRONMENTS = {"pypi/python-dateutil": {"2.9.0.post0": ["six==1.17.0"]}}


@pytest.fixture(scope="module")
def sdists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sdists")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q",
                           "-d", str(d), *[p[0] for p in PACKAGES]], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.skip(f"pip download of the sdists failed (needs PyPI): {proc.stderr[-300:]}")
    return d


def _clone_with_bug(sdist: Path, dest: Path, rel: str, good: str, bad: str) -> str:
    with tarfile.open(sdist) as tar:
        tar.extractall(dest.parent / "unpack", filter="data")
    (dest.parent / "unpack" / sdist.name.removesuffix(".tar.gz")).rename(dest)
    target = dest / rel
    text = target.read_text()
    assert text.count(good) == 1, f"{sdist.name}: the snippet to break is not unique in {rel}"
    target.write_text(text.replace(good, bad))
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-qm", "base with a planted bug")
    return _git(dest, "rev-parse", "HEAD").strip()


def _real_task_set(sdists: Path, tmp: Path) -> list[tuple[Path, dict]]:
    out = []
    for spec, rel, good, bad, tests, f2p, p2p, env in PACKAGES:
        name = spec.split("==")[0]
        (sdist,) = sdists.glob(f"{name.replace('-', '[-_]')}-*.tar.gz")
        clone = tmp / "clones" / name / f"pypi__{name}"
        clone.parent.mkdir(parents=True)
        base = _clone_with_bug(sdist, clone, rel, good, bad)
        rec = {"instance_id": f"pypi__{name}-1", "repo": f"pypi/{name}", "base_commit": base,
               "problem_statement": f"{name}: a planted regression in {rel}", "patch": diff_of(clone, {rel: (
                   clone / rel).read_text().replace(bad, good)}), "test_patch": diff_of(clone, tests),
               "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "version": spec.split("==")[1], "created_at": "2026-01-01"}
        out.append((clone.parent, rec | ({"options": env} if env else {})))
    return out


@pytest.mark.docker
def test_real_packages_import_validate_and_grade_in_docker(sdists: Path, tmp_path: Path) -> None:
    from harness.predictions import grade_predictions
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.validate import validate_task_set

    task_sets = []
    for repos, rec in _real_task_set(sdists, tmp_path):
        options = rec.pop("options", {})
        (repos / "r.jsonl").write_text(json.dumps(rec) + "\n")
        out = tmp_path / "tasks" / rec["instance_id"]
        (repos / "envs.json").write_text(json.dumps(ENVIRONMENTS))
        cmd = [sys.executable, "-m", "tgsuite.cli", "tasks", "import-swebench", "--records", str(repos / "r.jsonl"),
               "--repos", str(repos), "--out", str(out), "--environments", str(repos / "envs.json"),
               *[a for k, v in options.items() for a in (k, v)]]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        task_sets.append(out)
    (dateutil,) = load_task_set(task_sets[-1]).instances
    assert dateutil.image.startswith("tgsuite/env:") and dateutil.extra["environment"] == ["six==1.17.0"]
    assert load_task_set(task_sets[0]).instances[0].image == "base"
    (mi,) = load_task_set(task_sets[1]).instances
    assert mi.test_log_parser == "django" and mi.test_cmd == "python -m unittest -v"
    for out in task_sets:
        report = validate_task_set(out, runs=1, sandbox="docker")
        assert not report.rejected, [(r.instance_id, r.reason) for r in report.rejected]
        ts = load_task_set(out)
        (inst,) = ts.instances
        with TaskSandboxFactory(ts, kind="docker", run_id=f"pytest-swe-{os.getpid()}-{inst.instance_id}"[:60]) as f:
            f.preflight()
            gold = grade_predictions(ts, [Prediction(instance_id=inst.instance_id, model_name_or_path="gold",
                                                     model_patch=inst.patch)], tmp_path / "g" / out.name,
                                     sandbox_factory=f)
        assert gold[0].resolved and gold[0].status == "ok", gold[0].error
        assert gold[0].grade is not None and set(gold[0].grade.f2p.values()) == {"passed"}
