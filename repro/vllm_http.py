"""Rollouts from external ``vllm serve`` processes (``rollout.engine = "vllm_http"``): the project's one rollout-engine
protocol over vLLM's OpenAI-compatible HTTP API, with the trainer's weights pushed through a shared directory.

Start each server from a directory the trainer can write (``vllm_http.weights_dir``, a file system shared with the
trainer), holding the starting checkpoint as one ``model.safetensors`` plus ``config.json`` and the tokenizer::

    cp -r runs/sft/model /shared/policy          # or any checkpoint of this project (HF layout, one safetensors)
    VLLM_SERVER_DEV_MODE=1 vllm serve /shared/policy --logprobs-mode processed_logprobs \\
        --max-model-len 20480 --port 8000 [--tensor-parallel-size N] [--enable-prefix-caching]

then train with ``--set rollout.engine=vllm_http --set vllm_http.weights_dir=/shared/policy --set
vllm_http.urls='["http://host:8000"]'`` (several URLs: a fleet; requests are spread over them round-robin, every
server receives every weight push).

- **Requests** (``POST /v1/completions``): the prompt as a list of token ids (never re-tokenised),
  ``max_tokens``, ``temperature``, ``top_p``, one ``seed`` per request drawn from the caller's generator,
  ``stop_token_ids`` = the request's stop ids with ``ignore_eos`` (only they end a turn), ``logprobs = 0`` (the
  sampled token's log-prob), ``return_token_ids`` (the sampled ids come back as ``choices[0].token_ids``) and
  ``return_tokens_as_token_ids`` (the log-prob entries are named ``token_id:<id>``; they are checked against the ids).
  Up to ``vllm_http.concurrency`` requests are in flight at once (threads; the server batches them).
- **Log-probs**: the server must run with ``--logprobs-mode processed_logprobs`` (the log-prob of the distribution
  sampled from, after temperature and top-p: what the other engines report); the engine reads the server's
  configuration once (``GET /server_info?config_format=json``) and refuses another mode, or a server that serves
  another directory than ``weights_dir``.
- **Finish reasons**: as for the colocated engine (``repro.vllm_engine.finish_reason_of``): a stop id last is
  ``stop``, the length cap ``length``, anything else an error.
- **Weight push** (before generating, whenever the version stamp changed since the last push or the engine was
  rebound to another model): the bound model's weights (LoRA merged, in ``vllm_http.push_dtype``) are written to
  ``weights_dir/model.safetensors`` through a temporary file and an atomic rename, then every server is asked to
  reload them from disk (``POST /collective_rpc {"method": "reload_weights"}``: vLLM's workers re-read the directory
  they were started from) and to drop KV computed with the old weights (``POST /reset_prefix_cache``). Both
  endpoints exist only when the server runs with ``VLLM_SERVER_DEV_MODE=1``. (TRL's server mode pushes over NCCL
  instead — faster, no shared disk; not built here.)
- **Staleness**: the engine stamps every result with the version set by the trainer, as every engine does. In the
  training loop the factory is called once per batch with the model holding that version (the trainer's after the
  previous step; the async producer's copy when ``async.enabled``), so the servers sample with weights at most
  ``async.max_lead`` versions old and the trainer drops what is older than ``async.max_staleness``
  (``repro.async_producer``), exactly as for the other engines.

Under FSDP (``cluster.fsdp``) rank 0 pushes the weights all ranks gathered (``repro.distributed.push_sharded``) and
every rank samples its share of the batch from the servers. Not covered: the async producer under FSDP, pushing
over NCCL,
a weights directory holding sharded safetensors (refused: the reload would read the old shards), and servers that
sample while a push is under way (the loop pushes between batches; nothing else may use the servers then).
Tested on CPU against a fake server on loopback speaking the same wire format (``tests/vllm_http_fake.py``).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.policies.engine_protocol import TokenRequest, TokenResult
from repro.vllm_engine import finish_reason_of, named_weights, request_seed

if TYPE_CHECKING:
    from repro.config import TrainConfig

WEIGHTS_FILE = "model.safetensors"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class VLLMHttpError(RuntimeError):
    """A server answered something the engine cannot use (or not at all); the message names the server and the fix."""


@dataclass(frozen=True)
class HttpSettings:
    """``[vllm_http]`` of the training config."""

    urls: tuple[str, ...]
    weights_dir: str
    model: str = ""
    push_dtype: str = "bfloat16"
    timeout_s: float = 600.0
    concurrency: int = 64

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> HttpSettings:
        h = cfg.vllm_http
        if not h.weights_dir:
            raise VLLMHttpError("rollout.engine = 'vllm_http' needs vllm_http.weights_dir: the directory every "
                                "`vllm serve` was started from (see repro/vllm_http.py)")
        return cls(urls=tuple(u.rstrip("/") for u in h.urls), weights_dir=h.weights_dir, model=h.model,
                   push_dtype=h.push_dtype, timeout_s=h.timeout_s, concurrency=h.concurrency)


def call(url: str, path: str, body: dict[str, Any] | None = None, *, timeout: float = 600.0) -> Any:
    """``GET`` (no body) or ``POST`` JSON to ``url + path``; the decoded JSON answer (None for an empty one)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode(errors="replace")
        hint = (" (this endpoint exists only when the server runs with VLLM_SERVER_DEV_MODE=1)"
                if exc.code == 404 and path.split("?")[0] in ("/collective_rpc", "/reset_prefix_cache",
                                                              "/server_info") else "")
        raise VLLMHttpError(f"{url}{path}: HTTP {exc.code}{hint}: {detail}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise VLLMHttpError(f"{url}{path}: no answer ({exc}); is `vllm serve` running there?") from exc
    return json.loads(raw) if raw.strip() else None


def completion_body(request: TokenRequest, model: str, seed: int) -> dict[str, Any]:
    """The ``/v1/completions`` body of one request (module docstring)."""
    return {"model": model, "prompt": list(request.prompt_ids), "max_tokens": request.max_new_tokens,
            "temperature": request.temperature, "top_p": request.top_p, "seed": seed,
            "stop_token_ids": list(request.stop_ids), "ignore_eos": True, "logprobs": 0, "echo": False,
            "return_token_ids": True, "return_tokens_as_token_ids": True, "skip_special_tokens": False}


def parse_choice(request: TokenRequest, answer: Mapping[str, Any], version: int, where: str) -> TokenResult:
    """One ``/v1/completions`` answer as a :class:`TokenResult`; a malformed answer is an error naming ``where``."""
    try:
        choice = answer["choices"][0]
        ids = [int(t) for t in choice["token_ids"]]
        lp = choice["logprobs"]
        named, logprobs = lp["tokens"], [float(x) for x in lp["token_logprobs"]]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise VLLMHttpError(f"{where}: the completion has no token_ids / logprobs.tokens / logprobs.token_logprobs "
                            f"({type(exc).__name__}: {exc}); a vLLM version that supports return_token_ids is "
                            "needed") from exc
    if len(named) != len(ids) or len(logprobs) != len(ids):
        raise VLLMHttpError(f"{where}: {len(ids)} token ids but {len(named)} log-prob tokens and {len(logprobs)} "
                            "log-probs")
    if named != [f"token_id:{t}" for t in ids]:
        raise VLLMHttpError(f"{where}: the log-prob entries {named[:4]}… do not name the returned ids {ids[:4]}…")
    return TokenResult(ids, logprobs, finish_reason_of(ids, request, choice.get("finish_reason")), version)


def weights_of(model: torch.nn.Module, dtype: str) -> dict[str, torch.Tensor]:
    """The model's weights (HF names, LoRA merged) on the CPU in ``dtype``."""
    return {name: t.detach().to("cpu", DTYPES[dtype]).contiguous() for name, t in named_weights(model)}


def write_weights(tensors: dict[str, torch.Tensor], directory: Path) -> Path:
    """``tensors`` as ``directory/model.safetensors``, atomically (a temporary file, then a rename)."""
    from safetensors.torch import save_file

    tmp = directory / f".{WEIGHTS_FILE}.{os.getpid()}.tmp"  # not *.safetensors: a reload never reads it
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, directory / WEIGHTS_FILE)
    return directory / WEIGHTS_FILE


def check_weights_dir(directory: Path) -> None:
    if not (directory / "config.json").is_file():
        raise VLLMHttpError(f"vllm_http.weights_dir = {directory}: no config.json; copy the starting checkpoint "
                            "there (HF layout with one model.safetensors) and start `vllm serve` on it")
    extra = sorted(p.name for p in directory.glob("*.safetensors*") if p.name != WEIGHTS_FILE)
    if extra:
        raise VLLMHttpError(f"vllm_http.weights_dir = {directory} holds {extra}: the servers would reload those on "
                            "every push; keep the weights as one model.safetensors (e.g. save_pretrained with "
                            "max_shard_size='1000GB') and restart `vllm serve`")


class HttpEngine:
    """``RolloutEngine`` over one or more ``vllm serve`` processes (module docstring)."""

    def __init__(self, settings: HttpSettings, *, source: torch.nn.Module | None = None, version: int = 0) -> None:
        self.settings, self.source, self.version = settings, source, version
        self.directory = Path(settings.weights_dir)
        self.synced: int | None = None
        self.pushes = 0
        self.model = settings.model or ""
        self.checked = False
        self.pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="vllm-http")

    def current_version(self) -> int:
        return self.version

    def set_version(self, version: int) -> None:
        self.version = version

    def bind(self, source: torch.nn.Module) -> HttpEngine:
        """Sample with ``source``'s current weights: pushed before the next generation (a rebind always pushes)."""
        self.source, self.synced = source, None
        return self

    def handshake(self) -> None:
        """Once: the served model name, the log-prob mode and the served directory of every server."""
        check_weights_dir(self.directory)
        for url in self.settings.urls:
            info = call(url, "/server_info?config_format=json", timeout=self.settings.timeout_s)
            mc = (info.get("vllm_config") or {}).get("model_config") or {} if isinstance(info, dict) else {}
            mode = mc.get("logprobs_mode")
            if mode != "processed_logprobs":
                raise VLLMHttpError(f"{url}: the server reports logprobs_mode = {mode!r}; start it with "
                                    "`--logprobs-mode processed_logprobs` (the log-probs of the distribution sampled "
                                    "from, which the trainer's importance ratio needs)")
            served = mc.get("model")
            if served is None or Path(served).resolve() != self.directory.resolve():
                raise VLLMHttpError(f"{url}: the server serves {served!r}, not vllm_http.weights_dir = "
                                    f"{self.directory}; start it with `vllm serve {self.directory}`")
            if not self.model:
                models = call(url, "/v1/models", timeout=self.settings.timeout_s)
                self.model = models["data"][0]["id"]
        self.checked = True

    def push_weights(self) -> None:
        if self.source is None:
            raise VLLMHttpError("HttpEngine.push_weights: no source model bound; call bind(model) first")
        self.push_tensors(weights_of(self.source, self.settings.push_dtype))

    def push_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Write ``tensors`` to the served directory and have every server reload them (module docstring); the
        engine's version counts as pushed."""
        if not self.checked:
            self.handshake()
        write_weights(tensors, self.directory)
        for url in self.settings.urls:
            call(url, "/collective_rpc", {"method": "reload_weights", "args": [], "kwargs": {}},
                 timeout=self.settings.timeout_s)
            call(url, "/reset_prefix_cache", {}, timeout=self.settings.timeout_s)
        self.synced = self.version
        self.pushes += 1

    def generate(self, requests: Sequence[TokenRequest], *, generator: torch.Generator) -> list[TokenResult]:
        if not requests:
            raise ValueError("generate: no requests; pass at least one TokenRequest")
        if not self.checked:
            self.handshake()
        if self.source is not None and self.synced != self.version:
            self.push_weights()
        urls, version = self.settings.urls, self.version
        jobs = [(r, urls[i % len(urls)], completion_body(r, self.model, request_seed(generator)))
                for i, r in enumerate(requests)]

        def one(job: tuple[TokenRequest, str, dict[str, Any]]) -> TokenResult:
            req, url, body = job
            answer = call(url, "/v1/completions", body, timeout=self.settings.timeout_s)
            return parse_choice(req, answer, version, f"{url}/v1/completions")

        return list(self.pool.map(one, jobs))

    def close(self) -> None:
        self.pool.shutdown(wait=False)


class HttpRollouts:
    """The ``RLSetup.engine_factory`` for ``rollout.engine = "vllm_http"``: ``(model, pad_id) -> engine``; one
    :class:`HttpEngine`, rebound to the model it is called with. ``external``: the weights are pushed by someone
    else (:meth:`push`, rank 0 under FSDP: ``repro.distributed.push_sharded``), so the engines never push."""

    def __init__(self, settings: HttpSettings) -> None:
        self.settings = settings
        self.engine: HttpEngine | None = None
        self.external = False

    @property
    def push_dtype(self) -> torch.dtype:
        return DTYPES[self.settings.push_dtype]

    def __call__(self, model: torch.nn.Module, pad_id: int) -> HttpEngine:
        if self.engine is None:
            self.engine = HttpEngine(self.settings)
        if self.external:
            self.engine.source, self.engine.synced = None, None
            return self.engine
        return self.engine.bind(model)

    def push(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        """Push ``tensors`` (the weights of ``version``) to every server."""
        if self.engine is None:
            self.engine = HttpEngine(self.settings)
        self.engine.push_tensors({k: v.to(self.push_dtype) for k, v in tensors.items()})
        self.engine.synced = version
