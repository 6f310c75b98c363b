"""``harness.sandbox_docker_io.CreationGate``: a run that is stopping leaves no container made by a create request
that was still in flight when the stop's cleanup listed the run's containers (no engine needed: a fake API)."""

from __future__ import annotations

import threading
import time

import pytest

from harness.sandbox import SandboxUnavailable
from harness.sandbox_docker_io import CreationGate


class FakeApi:
    def __init__(self) -> None:
        self.removed: list[str] = []

    def remove_container(self, cid: str, force: bool = False, v: bool = False) -> None:
        assert force and v
        self.removed.append(cid)


def test_a_creation_in_flight_at_stop_removes_its_own_container_and_stop_waits_for_it() -> None:
    gate, api = CreationGate(), FakeApi()
    entered, release, errors = threading.Event(), threading.Event(), []

    def create() -> None:
        try:
            with gate.creating():
                entered.set()
                release.wait(5)  # the engine is slow to answer
                gate.discard_if_stopping(api, "c1")
        except SandboxUnavailable as exc:
            errors.append(str(exc))

    t = threading.Thread(target=create)
    t.start()
    assert entered.wait(5)
    threading.Timer(0.3, release.set).start()
    t0 = time.monotonic()
    assert gate.stop(wait_s=5) is True  # returned only once the creation had finished
    assert time.monotonic() - t0 >= 0.25
    t.join(5)
    assert api.removed == ["c1"] and errors and "stopping" in errors[0]
    with pytest.raises(SandboxUnavailable, match="stopping"), gate.creating():
        pass  # refused: no new container once stopping


def test_without_a_stop_nothing_is_removed_and_drain_is_bounded() -> None:
    gate, api = CreationGate(), FakeApi()
    with gate.creating():
        gate.discard_if_stopping(api, "c1")
        assert gate.drain(wait_s=0.05) is False  # still in flight: the wait ends at its bound
    assert api.removed == [] and gate.drain(wait_s=0.05) is True
