"""Shared fixtures and marker handling.

- ``@pytest.mark.docker`` tests need a Docker engine AND the base image. Without them they are skipped with the
  reason and the fix, except under ``CI=true`` where they FAIL (CI's set-up starts the engine and builds the
  image, so a missing one is a broken set-up, not a reason to go green).
- ``@pytest.mark.gpu`` tests are skipped cleanly when CUDA is not available.
- Fixtures: ``docker_client`` / ``docker_engine`` (engine client), ``base_image`` (tag), ``docker_provider`` (a
  ``DockerSandboxProvider`` whose containers are removed after the test), ``local_sandbox``, ``one_torch_thread``
  (module scope: tiny models on one intra-op thread; use with ``pytestmark = pytest.mark.usefixtures(...)``).
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny models run fastest on one intra-op thread (and do not fight other test processes); restored after."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@functools.lru_cache(maxsize=1)
def _docker_status() -> tuple[Any, str | None, str]:
    """(client or None, base image tag or None, reason when unusable)."""
    try:
        from harness import images
        from harness.sandbox import SandboxUnavailable

        client = images.connect(timeout=60)
    except SandboxUnavailable as exc:
        return None, None, str(exc)
    except Exception as exc:  # e.g. the docker SDK missing
        return None, None, f"Docker SDK unusable: {exc}"
    tag = images.base_image_tag()
    if not images.image_present(client, tag):
        return client, None, f"base image {tag} is not built. Fix: run `tgsuite images build` (needs root)."
    return client, tag, ""


@functools.lru_cache(maxsize=1)
def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("docker") is not None:
        _, tag, reason = _docker_status()
        if tag is None:
            if _in_ci():
                pytest.fail(f"CI=true but Docker is not usable: {reason}", pytrace=False)
            pytest.skip(f"Docker not usable: {reason}")
    if item.get_closest_marker("gpu") is not None and not _cuda_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")


@pytest.fixture(scope="session")
def docker_client() -> Any:
    client, tag, reason = _docker_status()
    if client is None or tag is None:
        if _in_ci():
            pytest.fail(f"CI=true but Docker is not usable: {reason}", pytrace=False)
        pytest.skip(f"Docker not usable: {reason}")
    return client


@pytest.fixture(scope="session")
def docker_engine(docker_client: Any) -> Any:
    """Alias of ``docker_client`` (the name the platform issue uses)."""
    return docker_client


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    return _docker_status()[1]  # type: ignore[return-value]


@pytest.fixture
def docker_provider(docker_client: Any, base_image: str) -> Iterator[Any]:
    """A provider with a unique run id; every container it made is removed after the test."""
    from harness.sandbox_docker_provider import DockerSandboxProvider

    provider = DockerSandboxProvider(docker_client, run_id=f"pytest-{uuid.uuid4().hex[:10]}")
    yield provider
    provider.cleanup_run()


@pytest.fixture
def local_sandbox() -> Iterator[Any]:
    from harness.sandbox_local import LocalSandbox

    with LocalSandbox() as box:
        yield box
