"""``rollout.engine = "vllm_http"`` (repro.vllm_http) against fake ``vllm serve`` processes on loopback
(tests/vllm_http_fake.py): the engine contract (ids, processed log-probs, finish reasons, version stamps), the
weight push through the shared directory and the reload endpoint, the refusals that name their fix, and RL steps
through ``train_rl`` synchronously, asynchronously (bounded staleness) and over a fleet of two servers."""

from __future__ import annotations

from pathlib import Path

import _rl_fixtures as F
import pytest
import torch
from vllm_http_fake import FakeServer

from harness.policies.sampling import sampling_logprobs
from repro.config import ConfigError
from repro.engine import TokenRequest
from repro.rl_setup import engine_factory_for
from repro.vllm_http import HttpEngine, HttpRollouts, HttpSettings, VLLMHttpError


@pytest.fixture()
def served(tmp_path: Path) -> Path:
    """The starting checkpoint (the fixtures' nano model, seed 0) as a server directory."""
    d = tmp_path / "policy"
    F.setup(seed=0).model.save_pretrained(d, safe_serialization=True)
    return d


def settings(d: Path, *urls: str, dtype: str = "float32") -> HttpSettings:
    return HttpSettings(urls=tuple(urls), weights_dir=str(d), push_dtype=dtype, concurrency=4)


@torch.no_grad()
def trainer_lp(model: torch.nn.Module, req: TokenRequest, ids: list[int]) -> torch.Tensor:
    logits = model(input_ids=torch.tensor([list(req.prompt_ids) + ids])).logits[0].float()
    n = len(req.prompt_ids)
    lp = sampling_logprobs(logits[n - 1:n - 1 + len(ids)], temperature=req.temperature, top_p=req.top_p)
    return lp.gather(1, torch.tensor(ids)[:, None]).squeeze(1)


def test_generate_returns_ids_processed_logprobs_finish_reasons_and_the_version(served: Path) -> None:
    torch.manual_seed(0)
    model = F.setup(seed=0).model.eval()
    with FakeServer(served) as srv:
        engine = HttpEngine(settings(served, srv.url), version=3)
        reqs = [TokenRequest([1, 5, 7, 9], 6, (2,), 0.8, 0.9), TokenRequest([1, 4], 1, (2,), 0.8, 0.9),
                TokenRequest([1, 6, 6], 12, tuple(range(5, 60)), 1.0, 1.0)]
        out = engine.generate(reqs, generator=torch.Generator().manual_seed(1))
        assert [r.version for r in out] == [3, 3, 3] and len(out[1].ids) == 1
        for req, res in zip(reqs, out, strict=True):
            assert len(res.logprobs) == len(res.ids) >= 1
            # the server reports the log-prob of the distribution sampled from (temperature, then top-p)
            assert torch.allclose(torch.tensor(res.logprobs), trainer_lp(model, req, res.ids), atol=1e-5)
            assert res.finish_reason == ("stop" if res.ids[-1] in req.stop_ids else "length")
        assert out[2].finish_reason == "stop"  # most ids stop the third request
        # requests go out concurrently, so the server may see them in any order
        body = next(b for b in srv.bodies if b["prompt"] == [1, 5, 7, 9])
        assert body["logprobs"] == 0 and body["ignore_eos"] is True
        assert body["return_token_ids"] and body["model"] == "policy" and isinstance(body["seed"], int)
        # the same generator state gives the same samples (one seed per request from the caller's generator)
        again = engine.generate(reqs, generator=torch.Generator().manual_seed(1))
        assert [r.ids for r in again] == [r.ids for r in out]


def test_a_new_version_is_pushed_through_the_directory_and_the_reload_endpoint(served: Path) -> None:
    model = F.setup(seed=0).model
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    with FakeServer(served) as srv:
        engine = HttpRollouts(settings(served, srv.url))(model, 0)
        engine.set_version(1)
        req = [TokenRequest([1, 5], 3, (2,), 1.0, 1.0)]
        engine.generate(req, generator=torch.Generator().manual_seed(0))
        assert (srv.reloads, srv.prefix_resets, engine.pushes) == (1, 1, 1)
        served_w = dict(srv.llm.model.named_parameters())
        for name, p in model.named_parameters():
            assert torch.equal(served_w[name], p.detach()), name  # float32 push: exact
        engine.generate(req, generator=torch.Generator().manual_seed(0))
        assert srv.reloads == 1  # same version, same model: no push
        engine.set_version(2)
        engine.generate(req, generator=torch.Generator().manual_seed(0))
        assert srv.reloads == 2
        assert not list(served.glob(".*tmp"))  # the temporary file was renamed into place


def test_refusals_name_the_fix(served: Path, tmp_path: Path) -> None:
    req = [TokenRequest([1, 5], 2, (2,), 1.0, 1.0)]
    gen = torch.Generator().manual_seed(0)
    with FakeServer(served, logprobs_mode="raw_logprobs") as srv:
        with pytest.raises(VLLMHttpError, match="--logprobs-mode processed_logprobs"):
            HttpEngine(settings(served, srv.url)).generate(req, generator=gen)
    with FakeServer(served, dev_mode=False) as srv:
        with pytest.raises(VLLMHttpError, match="VLLM_SERVER_DEV_MODE=1"):
            HttpEngine(settings(served, srv.url)).generate(req, generator=gen)
    other = tmp_path / "other"
    F.setup(seed=0).model.save_pretrained(other, safe_serialization=True)
    with FakeServer(other) as srv:
        with pytest.raises(VLLMHttpError, match="vllm serve .*policy"):
            HttpEngine(settings(served, srv.url)).generate(req, generator=gen)
    (served / "model-00002-of-00002.safetensors").write_bytes(b"")
    with pytest.raises(VLLMHttpError, match="one model.safetensors"):
        HttpEngine(settings(served, "http://127.0.0.1:9")).generate(req, generator=gen)
    (served / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(VLLMHttpError, match="is `vllm serve` running there"):
        HttpEngine(settings(served, "http://127.0.0.1:9")).generate(req, generator=gen)
    with pytest.raises(ConfigError, match="vllm_http.weights_dir"):
        engine_factory_for(F.config("grpo", "rollout.engine=vllm_http"))


def http_config(d: Path, *urls: str, steps: int = 2, sets: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    url_list = "[" + ", ".join(f'"{u}"' for u in urls) + "]"
    return F.config("tg", f"run.steps={steps}", "rollout.engine=vllm_http", f"vllm_http.weights_dir={d}",
                    f"vllm_http.urls={url_list}", "vllm_http.push_dtype=float32", "rollout.temperature=0.9",
                    *sets)


def test_rl_steps_sample_from_the_servers_with_the_trainers_weights(served: Path, tmp_path: Path) -> None:
    from repro.train import train_rl

    torch.set_num_threads(1)
    with FakeServer(served) as srv:
        cfg = http_config(served, srv.url)
        setup = F.setup(seed=0)
        setup.engine_factory = engine_factory_for(cfg)
        train_rl(cfg, tmp_path / "run", setup=setup)
        rows = F.metrics(tmp_path / "run")
        assert [r["rollout/staleness_max"] for r in rows] == [0, 0]
        assert setup.engine_factory.engine.pushes == 2 and srv.reloads == 2  # version 0, then version 1
        # the behaviour log-probs are the trainer's own (float32 push): the importance ratios are 1
        assert all(abs(r["pg/ratio_mean"] - 1) < 1e-4 for r in rows)
        # the servers hold the weights of the last version that sampled (step 1's), not the final ones
        from safetensors.torch import load_file

        step1 = load_file(str(tmp_path / "run" / "checkpoints" / "step_2" / "model.safetensors"))
        served_w = dict(srv.llm.model.named_parameters())
        assert any(not torch.equal(served_w[k], v) for k, v in step1.items() if k in served_w)


def test_async_rollouts_over_a_fleet_of_two_servers_keep_staleness_bounded(served: Path, tmp_path: Path) -> None:
    from repro.train import train_rl

    torch.set_num_threads(1)
    with FakeServer(served) as a, FakeServer(served) as b:
        cfg = http_config(served, a.url, b.url, steps=3, sets=("async.enabled=true", "async.max_staleness=1"))
        setup = F.setup(seed=0)
        setup.engine_factory = engine_factory_for(cfg)
        train_rl(cfg, tmp_path / "run", setup=setup)
        rows = F.metrics(tmp_path / "run")
        assert len(rows) == 3 and all(r["rollout/staleness_max"] <= 1 for r in rows)
        assert len(a.bodies) >= len(b.bodies) > 0  # round-robin from the first server in every generate call
        assert a.reloads == b.reloads == setup.engine_factory.engine.pushes >= 2  # every push reaches every server
