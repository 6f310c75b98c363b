"""Base image: content-hash tags, apt-source parsing, idempotent ensure, failed builds leave no tag."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from harness import images
from harness.images import ImageBuildError, base_image_tag, content_key, find_apt_mirror, parse_apt_sources

ONE_LINE = """\
# comment
deb http://mirror.example/debian bookworm main contrib
deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://other.example/debian bookworm-updates main
deb-src http://src.example/debian bookworm main
"""

DEB822 = """\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: http://disabled.example/debian
Suites: trixie
Components: main
Enabled: no
"""


def test_tag_is_a_content_hash_of_recipe_suite_and_packages() -> None:
    assert base_image_tag() == base_image_tag()
    assert base_image_tag().startswith("tgsuite/base:bookworm-")
    assert content_key("bookworm", ["git", "python3"]) == content_key("bookworm", ["python3", "git", "git"])
    assert content_key("bookworm", ["git"]) != content_key("trixie", ["git"])
    assert content_key("bookworm", ["git"]) != content_key("bookworm", ["git", "patch"])
    for pkg in ("python3", "python3-pytest", "git", "patch"):
        assert pkg in images.BASE_PACKAGES


def test_tag_changes_with_the_recipe_version(monkeypatch: pytest.MonkeyPatch) -> None:
    before = base_image_tag()
    monkeypatch.setattr(images, "RECIPE_VERSION", images.RECIPE_VERSION + 1)
    assert base_image_tag() != before


def test_parse_one_line_sources() -> None:
    assert parse_apt_sources(ONE_LINE, deb822=False) == [
        ("http://mirror.example/debian", ["bookworm"], ["main", "contrib"]),
        ("http://other.example/debian", ["bookworm-updates"], ["main"]),
    ]


def test_parse_deb822_sources_skips_disabled() -> None:
    got = parse_apt_sources(DEB822, deb822=True)
    assert got == [
        ("http://mirror.example/debian", ["bookworm", "bookworm-updates"], ["main"]),
        ("http://security.example/debian-security", ["bookworm-security"], ["main"]),
    ]


def test_find_apt_mirror_reads_the_machine_sources(tmp_path: Path) -> None:
    (tmp_path / "a.sources").write_text(DEB822)
    (tmp_path / "b.list").write_text(ONE_LINE)
    pats = [str(tmp_path / "*.list"), str(tmp_path / "*.sources")]
    assert find_apt_mirror("bookworm", pats) == "http://mirror.example/debian"
    with pytest.raises(ImageBuildError, match="--mirror"):
        find_apt_mirror("trixie", pats)  # only in a disabled stanza


def test_no_host_name_or_machine_path_is_written_in_the_module() -> None:
    source = Path(images.__file__).read_text()
    assert "deb.debian.org" not in source and "snapshot.debian.org" not in source and "/work/main" not in source and "/root/" not in source


@pytest.mark.docker
def test_ensure_is_idempotent_and_fast(docker_client: Any, base_image: str) -> None:
    start = time.monotonic()
    assert images.ensure_base_image(docker_client) == base_image
    assert time.monotonic() - start < 2.0
    assert "tgsuite/base:latest" in docker_client.images.get(base_image).tags


@pytest.mark.docker
def test_image_records_its_package_manifest_and_user(docker_client: Any, base_image: str) -> None:
    manifest = images.image_manifest(docker_client, base_image)
    for pkg in ("python3", "python3-pytest", "git", "patch", "coreutils"):
        assert pkg in manifest, pkg
    labels = docker_client.images.get(base_image).labels
    assert labels[images.LABEL_KEY] == content_key()
    out = docker_client.containers.run(
        base_image, ["sh", "-c", "id -un; stat -c %U /work; python3 -m pytest --version"], remove=True,
        network_mode="none", stderr=True,
    ).decode()
    assert out.splitlines()[:2] == ["agent", "agent"] and "pytest" in out


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("debootstrap") is None, reason="needs root and debootstrap")
def test_failed_build_leaves_no_tag_and_no_temp_dir(docker_client: Any, tmp_path: Path) -> None:
    packages = ("python3", f"tgsuite-test-{os.getpid()}")
    tag = base_image_tag("bookworm", packages)
    stale = tmp_path / "tgsuite-base-stale"  # left by a build that was SIGKILLed
    (stale / "rootfs").mkdir(parents=True)
    docker_client.images.get(images.ALIAS_TAG).tag(images.REPOSITORY, "tmp-stale0000")
    with pytest.raises(ImageBuildError, match="debootstrap"):
        images.ensure_base_image(
            docker_client, packages=packages, mirror="http://127.0.0.1:9/debian", build_dir=str(tmp_path)
        )
    assert not images.image_present(docker_client, tag)
    assert not any(t.startswith("tgsuite/base:tmp-") for img in docker_client.images.list() for t in img.tags)
    assert list(tmp_path.iterdir()) == []


def test_build_refuses_cleanly_without_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ImageBuildError, match="root"):
        images._preflight_build(str(tmp_path))


def test_connect_pools_a_connection_per_concurrent_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    """One client serves every worker of a run; a pool smaller than the evaluation's concurrency makes the SDK
    log 'Connection pool is full, discarding connection' for every extra worker."""
    import docker

    from tgsuite.pipeline.presets import PRESETS

    seen: dict[str, Any] = {}

    class Fake:
        def ping(self) -> bool:
            return True

    def from_env(**kwargs: Any) -> Fake:
        seen.update(kwargs)
        return Fake()

    monkeypatch.setattr(docker, "from_env", from_env)
    images.connect(timeout=5)
    assert seen["max_pool_size"] == images.POOL_SIZE
    assert images.POOL_SIZE >= max(p.eval.concurrency for p in PRESETS.values())


@pytest.mark.docker
def test_the_real_client_keeps_the_pool_it_was_given(docker_client: Any) -> None:
    client = images.connect(timeout=30)
    adapter = client.api.get_adapter(client.api.base_url)
    assert adapter.max_pool_size == images.POOL_SIZE
