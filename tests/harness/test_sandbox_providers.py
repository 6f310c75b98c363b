"""The sandbox provider registry (``harness.sandbox_providers``): one list of kinds, one provider per kind, and
every CLI choice and config schema reads the kinds from ``harness.sandbox``. No test here needs the Docker engine
(making a Docker provider does not connect to it)."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import get_args

import pytest

from harness.sandbox import SANDBOX_KINDS, SandboxKind
from harness.sandbox_providers import PROVIDERS, SandboxFactory, make_provider
from harness.schema import TaskInstance, TaskSet

ROOT = Path(__file__).resolve().parents[2]


def test_every_kind_maps_to_a_provider_and_nothing_else_does() -> None:
    assert SANDBOX_KINDS == get_args(SandboxKind) == ("docker", "local")
    assert list(PROVIDERS) == list(SANDBOX_KINDS)


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_each_provider_offers_the_protocol(kind: str) -> None:
    provider = make_provider(kind, run_id="pytest-registry")
    for name in ("preflight_images", "create", "disk_limit", "stop", "cleanup_run"):
        assert callable(getattr(provider, name)), name
    assert isinstance(provider.isolated, bool) and isinstance(provider.caps_disk, bool)
    assert provider.isolated is (kind == "docker")  # only Docker keeps model-written code off the host


def test_the_local_provider_needs_no_engine_and_caps_files_only() -> None:
    from harness.sandbox import SandboxSpec
    from harness.sandbox_local import FILE_SIZE_LIMIT, LocalSandbox

    provider = make_provider("local", run_id="pytest-registry")
    assert provider.preflight_images(["base", "other"]) == {} and not provider.caps_disk
    assert provider.disk_limit(SandboxSpec()) == {"mode": "rlimit-fsize", "bytes": None,
                                                  "per_file_bytes": FILE_SIZE_LIMIT, "capped": "each file only"}
    with provider.create(SandboxSpec(), instance_id="i", attempt=0) as sb:
        assert isinstance(sb, LocalSandbox) and sb.exec("echo hi", timeout=10).stdout == "hi\n"
    provider.stop()
    assert provider.cleanup_run() == 0


def test_an_unknown_kind_is_refused_naming_the_valid_ones(tmp_path: Path) -> None:
    from harness.runner_sandbox import TaskSandboxFactory

    with pytest.raises(ValueError, match=r"sandbox kind must be 'docker' or 'local', got 'kvm'"):
        make_provider("kvm", run_id="x")
    ts = TaskSet(name="t", path=str(tmp_path), sha256="0" * 64, instances=[])
    with pytest.raises(ValueError, match=r"'docker' or 'local', got 'kvm'"):
        TaskSandboxFactory(ts, kind="kvm", run_id="x")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", SANDBOX_KINDS)
def test_the_task_factory_takes_its_kind_from_the_provider(kind: SandboxKind, tmp_path: Path) -> None:
    from harness.runner_sandbox import TaskSandboxFactory

    ts = TaskSet(name="t", path=str(tmp_path), sha256="0" * 64, instances=[])
    with TaskSandboxFactory(ts, kind=kind, run_id="pytest-registry") as fac:
        assert fac.kind == kind and fac.isolated is (kind == "docker")
        if kind == "local":  # Docker's disk limit asks the engine for its storage driver
            assert fac.disk_limit()["mode"] == "rlimit-fsize"


# ------------------------------------------------------------------------------------------------ who reads the kinds


def _sandbox_options(parser: argparse.ArgumentParser, path: str = "tgsuite") -> dict[str, argparse.Action]:
    found: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if "--sandbox" in action.option_strings:
            found[path] = action
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(_sandbox_options(sub, f"{path} {name}"))
    return found


def test_cli_choices_are_the_registrys_kinds() -> None:
    from tgsuite.cli import build_parser

    options = _sandbox_options(build_parser())
    assert {"tgsuite eval", "tgsuite grade", "tgsuite serve-tools", "tgsuite tasks validate"} <= set(options)
    for path, action in options.items():
        assert tuple(action.choices or ()) == SANDBOX_KINDS, path


def test_config_and_record_schemas_accept_exactly_the_registrys_kinds() -> None:
    from harness.schema import RunManifest
    from harness.validate import ValidationReport
    from repro.config import RolloutCfg
    from tgsuite.pipeline.presets import EvalSettings

    for model in (RolloutCfg, EvalSettings, RunManifest):
        assert get_args(model.model_fields["sandbox"].annotation) == SANDBOX_KINDS, model.__name__
        assert tuple(model.model_json_schema()["properties"]["sandbox"]["enum"]) == SANDBOX_KINDS
    assert get_args(ValidationReport.model_fields["sandbox"].annotation) == (*SANDBOX_KINDS, "custom")


def _copies_of_the_kinds(path: Path) -> list[str]:
    """Lines of ``path`` that spell the kinds out: a ``Literal`` naming two of them, or a ``--sandbox`` option whose
    choices are not ``SANDBOX_KINDS``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
            names = {n.value for n in ast.walk(node.slice) if isinstance(n, ast.Constant)}
            if len(names & set(SANDBOX_KINDS)) > 1:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
        if (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("add_argument")
                and any(isinstance(a, ast.Constant) and a.value == "--sandbox" for a in node.args)):
            choices = [k.value for k in node.keywords if k.arg == "choices"]
            if not choices or ast.unparse(choices[0]) != "SANDBOX_KINDS":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: --sandbox without choices=SANDBOX_KINDS")
    return found


def test_the_kinds_are_spelled_out_only_in_harness_sandbox() -> None:
    files = [p for d in ("harness", "repro", "tgsuite", "evalsuite", "reports", "benchmarks", "scripts")
             for p in sorted((ROOT / d).rglob("*.py"))]
    copies = [line for p in files if p != ROOT / "harness" / "sandbox.py" for line in _copies_of_the_kinds(p)]
    assert copies == [], "read the kinds from harness.sandbox (SandboxKind, SANDBOX_KINDS):\n" + "\n".join(copies)
    assert _copies_of_the_kinds(ROOT / "harness" / "sandbox.py")  # the one definition is found by the scan


# ------------------------------------------------------------------------------------------------ the factory seam


def test_a_factory_subclass_gets_the_optional_members_defaults() -> None:
    from harness.sandbox_local import LocalSandbox

    class Minimal(SandboxFactory):
        kind: SandboxKind = "local"
        isolated = False

        def open(self, instance, *, role, attempt):  # pragma: no cover - not called
            raise AssertionError

        def image_digests(self) -> dict[str, str]:
            return {}

    fac = Minimal()
    inst = TaskInstance.model_construct(instance_id="i")
    assert fac.base_repo(inst) is None and fac.disk_limit() == {} and fac.interrupt() == 0
    with fac.open_scratch() as sb:
        assert isinstance(sb, LocalSandbox)
