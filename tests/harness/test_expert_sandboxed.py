"""``ScriptedExpert`` executes the code it read only inside a sandbox (issue #14 item 1).

The task's module writes a marker when it is executed. Screening the candidate fixes must still work (the right
fix ranks first, so the code did run), and no marker may appear on the host: not in the harness's working
directory or a directory named by the harness's environment (``LocalSandbox`` runs with a scrubbed environment
in its own temp directory) and, under Docker, not even at an absolute host path.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from harness.policies.scripted import ScriptedExpert, _ranked_fixes, _Target

TESTS = "from pkg.calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
TARGET = _Target("pkg/calc.py", "pkg.calc", "add", "tests/test_calc.py", ("test_add",), (5,))


def _module(marker_expr: str) -> str:
    return (f"import os\nopen({marker_expr}, 'w').write('ran')\n\n\n"
            "def add(a, b):\n    return a - b\n")


def test_screening_leaves_no_marker_on_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TGS_MARKER_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    module = _module("os.path.join(os.environ.get('TGS_MARKER_DIR', '.'), 'marker-' + str(os.getpid()))")
    fixes = _ranked_fixes(module, TESTS, TARGET)
    assert fixes and "a + b" in fixes[0].new
    assert list(tmp_path.iterdir()) == [], "task code ran on the host"


def test_expert_uses_the_sandbox_it_is_given() -> None:
    opened: list[str] = []

    def opener():
        from harness.sandbox_local import LocalSandbox

        opened.append("x")
        return LocalSandbox()

    module = _module("'marker-given'") + "\n# variant so the memo does not answer\n"
    expert = ScriptedExpert(screen_sandbox=opener)
    fixes = _ranked_fixes(module, TESTS, TARGET, expert.screen_sandbox)
    assert opened == ["x"] and "a + b" in fixes[0].new


@pytest.mark.docker
def test_screening_in_docker_leaves_no_marker_at_an_absolute_host_path(docker_provider) -> None:
    marker = Path(f"/tmp/tgsuite-marker-{uuid.uuid4().hex}")
    module = _module(repr(str(marker)))
    fixes = _ranked_fixes(module, TESTS, TARGET, docker_provider.create)
    assert fixes and "a + b" in fixes[0].new
    assert not marker.exists() and not os.path.lexists(marker)


def test_runner_gives_the_expert_its_factorys_scratch_sandboxes() -> None:
    from harness.runner_arms import _policy_options
    from harness.schema import TaskSet

    class Factory:
        def open_scratch(self):  # pragma: no cover - only passed along
            raise AssertionError

    ts = TaskSet(name="t", path=".", sha256="0", instances=[])
    fac = Factory()
    assert _policy_options("expert", ts, fac) == {"screen_sandbox": fac.open_scratch}
    assert _policy_options("oracle", ts, fac) == {"tasks": ts}
    assert _policy_options("null", ts, fac) == {}
