"""Environment images: wheels downloaded on the host, installed in a container without network, cached by key."""

from __future__ import annotations

from typing import Any

import pytest

from harness.env_images import SITE_DIR, check_requirements, ensure_env_image, env_image_tag


def test_requirements_must_be_pinned_and_the_key_is_order_free() -> None:
    assert check_requirements(["six==1.17.0", "idna==3.10", "six==1.17.0"]) == ["idna==3.10", "six==1.17.0"]
    for bad in (["six"], ["six>=1"], ["six==1.17.0; python_version<'4'"], []):
        with pytest.raises(ValueError, match="pinned|at least one"):
            check_requirements(bad)
    a = env_image_tag(["six==1.17.0", "idna==3.10"], "tgsuite/base:x")
    assert a == env_image_tag(["idna==3.10", "six==1.17.0"], "tgsuite/base:x")
    assert a != env_image_tag(["idna==3.10", "six==1.16.0"], "tgsuite/base:x")
    assert a != env_image_tag(["idna==3.10", "six==1.17.0"], "tgsuite/base:y") and a.startswith("tgsuite/env:")


@pytest.mark.docker
def test_env_image_is_built_offline_and_reused(docker_client: Any, base_image: str) -> None:
    reqs = ["six==1.17.0", "iniconfig==2.0.0"]
    try:
        tag, built = ensure_env_image(docker_client, reqs)
    except Exception as exc:  # the host's pip download needs PyPI
        if "pip download" in str(exc):
            pytest.skip(f"no wheels from PyPI: {exc}")
        raise
    try:
        out = docker_client.containers.run(
            tag, ["python3", "-c", "import six, iniconfig, os; print(six.__version__, six.__file__, os.getuid())"],
            remove=True, network_mode="none").decode().split()
        assert out == ["1.17.0", f"{SITE_DIR}/six.py", "1000"]
        again, built_again = ensure_env_image(docker_client, list(reversed(reqs)))
        assert again == tag and built_again is False
        labels = docker_client.images.get(tag).labels
        assert labels["tgsuite.requirements"] == "iniconfig==2.0.0 six==1.17.0" and labels["tgsuite.base_image"]
        assert not docker_client.containers.list(all=True, filters={"label": "tgsuite.envbuild=1"})
    finally:
        if built:
            docker_client.images.remove(tag, force=True)
