"""vLLM rollouts (``rollout.engine = "vllm"``): a colocated ``vllm.LLM`` behind the project's one rollout-engine
protocol (``harness.policies.engine_protocol``), with the trainer's weights pushed into it when the version changes.

- Token in, token out: every request goes to ``LLM.generate`` as ``{"prompt_token_ids": ids}`` (the engine is
  built with ``skip_tokenizer_init=True`` and ``detokenize=False``), so multi-turn prompts are never re-tokenised.
- Log-probs: ``SamplingParams(logprobs=0)`` returns the sampled token's log-prob, and the engine is built with
  ``logprobs_mode="processed_logprobs"``: the log-prob under the distribution actually sampled from (after
  temperature and top-p), the same quantity as ``harness.policies.sampling.sampling_logprobs`` (our other engines).
- Stop ids: ``stop_token_ids = request.stop_ids`` with ``ignore_eos=True``, so only the request's stop ids end a
  turn (not the checkpoint's ``eos_token_id`` behind the caller's back). The stop token is kept in the ids.
- Finish reasons: vLLM checks the length cap before the stop ids, so a stop id sampled as the last allowed token
  comes back as ``"length"``; the adapter reports ``"stop"`` whenever the last id is a stop id (as ``HFEngine`` and
  ``KVSampler`` do, and as ``repro.rollout`` checks). Any other vLLM reason (``abort``, a stop string) is an error.
- Randomness: one ``SamplingParams.seed`` per request, drawn from the caller's ``torch.Generator``.
- Versions: ``set_version(v)`` stamps every result, as for every engine. Before generating, when the engine was
  (re)bound to a model (``bind``: every call of the factory, i.e. once per batch) or the stamp changed since the
  last transfer, the bound model's parameters are loaded into vLLM's model through
  ``Model.load_weights`` (the colocated path TRL 1.16 uses: ``llm.llm_engine.model_executor.driver_worker
  .model_runner.model``) and ``llm.reset_prefix_cache()`` drops KV computed with the old weights. In the training
  loop the engine is asked for once per batch with the model whose weights are that version (the trainer's
  model after the previous optimizer step, or the async producer's copy), so staleness is bounded exactly as for
  the other engines (``repro.async_producer``).

The engine is built with ``distributed_executor_backend="external_launcher"`` (the model runs in this process,
as TRL's colocate mode does), so ``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` / ``MASTER_PORT`` are set when
missing. vLLM is imported lazily (the ``gpu`` extra; it needs CUDA): without it :class:`VLLMUnavailable` says how
to install it. Tested on CPU against a faithful fake of the vLLM objects used (``tests/vllm_fakes.py``); the real
engine is exercised only by ``scripts/gpu_check.sh`` on a GPU machine. An external ``vllm serve`` over HTTP is
``rollout.engine = "vllm_http"`` (``repro.vllm_http``, which reuses this module's request seeds, finish reasons and
weight names). Not covered: tensor parallelism, sleep mode.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.policies.engine_protocol import FinishReason, TokenRequest, TokenResult
from repro.lora import has_lora, merged_state_dict, save_pretrained

if TYPE_CHECKING:
    from vllm import LLM, RequestOutput

    from repro.config import TrainConfig

INSTALL_HINT = ("install the gpu extra on a CUDA machine: pip install -e '.[gpu]' (scripts/gpu_check.sh does it in "
                "its own virtual environment, because vLLM pins its own torch build)")


class VLLMUnavailable(RuntimeError):
    """vLLM cannot be imported (or there is no CUDA device for it)."""


@dataclass(frozen=True)
class VLLMApi:
    """The two vLLM classes the adapter uses; tests pass fakes with the same signatures."""

    llm_cls: Any
    sampling_params_cls: Any


def import_vllm() -> VLLMApi:
    """``vllm.LLM`` and ``vllm.SamplingParams``, or :class:`VLLMUnavailable` naming the fix."""
    try:
        import vllm
    except ImportError as exc:
        raise VLLMUnavailable(f"rollout.engine = 'vllm' needs vLLM, which is not importable ({exc}); "
                              f"{INSTALL_HINT}") from exc
    return VLLMApi(vllm.LLM, vllm.SamplingParams)


@dataclass(frozen=True)
class VLLMSettings:
    """How to build the engine (``[vllm]`` of the training config plus the rollout sizes)."""

    gpu_memory_utilization: float = 0.3
    dtype: str = "bfloat16"
    max_model_len: int = 4096
    max_num_seqs: int = 64
    enforce_eager: bool = True
    seed: int = 0

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> VLLMSettings:
        v, r = cfg.vllm, cfg.rollout
        return cls(gpu_memory_utilization=v.gpu_memory_utilization, dtype=v.dtype,
                   max_model_len=v.max_model_len or r.max_context_tokens + r.max_new_tokens,
                   max_num_seqs=v.max_num_seqs or r.groups * r.group_size, enforce_eager=v.enforce_eager,
                   seed=cfg.run.seed)


def runner_model(llm: LLM) -> torch.nn.Module:
    """vLLM's in-process model (the object with ``load_weights``), as TRL 1.16's colocate mode reaches it."""
    try:
        return llm.llm_engine.model_executor.driver_worker.model_runner.model
    except AttributeError as exc:
        raise RuntimeError("vLLM's model is not reachable at llm.llm_engine.model_executor.driver_worker"
                           ".model_runner.model (a vLLM version outside the gpu extra's range, or an engine not "
                           "built with distributed_executor_backend='external_launcher')") from exc


def named_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """HF parameter names and tensors (tied weights once), the names vLLM's ``load_weights`` maps. A model with LoRA
    adapters (``repro.lora``) gives its merged weights under the plain names, so vLLM samples the adapted policy."""
    if not has_lora(model):
        for name, p in model.named_parameters():
            yield name, p.detach()
        return
    merged = merged_state_dict(model)
    for name, _ in model.named_parameters():
        if ".lora_" not in name:
            plain = name.replace(".base_layer.", ".")
            yield plain, merged[plain]


def request_seed(generator: torch.Generator) -> int:
    return int(torch.randint(0, 2**62, (1,), generator=generator))


def finish_reason_of(ids: Sequence[int], request: TokenRequest, vllm_reason: str | None) -> FinishReason:
    """The protocol's reason from the ids (a stop id last → ``stop``) and vLLM's (length cap → ``length``)."""
    if ids and ids[-1] in request.stop_ids:
        return "stop"
    if vllm_reason == "length" or len(ids) >= request.max_new_tokens:
        return "length"
    raise RuntimeError(f"vLLM finished a request with finish_reason={vllm_reason!r} after {len(ids)} of "
                       f"{request.max_new_tokens} tokens without a stop id (stop ids {list(request.stop_ids)}); "
                       "the rollout cannot use it (an aborted request, or a stop string set outside this adapter)")


def to_result(request: TokenRequest, output: RequestOutput, version: int) -> TokenResult:
    """One ``RequestOutput`` (its first ``CompletionOutput``) as a :class:`TokenResult`."""
    comp = output.outputs[0]
    ids = [int(t) for t in comp.token_ids]
    if comp.logprobs is None:
        raise RuntimeError("vLLM returned no log-probs; the adapter asks for SamplingParams(logprobs=0)")
    if len(comp.logprobs) != len(ids):
        raise RuntimeError(f"vLLM returned {len(comp.logprobs)} log-prob entries for {len(ids)} tokens")
    logprobs = [float(entry[t].logprob) for entry, t in zip(comp.logprobs, ids, strict=True)]
    return TokenResult(ids, logprobs, finish_reason_of(ids, request, comp.finish_reason), version)


class VLLMEngine:
    """``RolloutEngine`` over one ``vllm.LLM`` (see the module docstring). ``source`` is the torch model whose
    weights vLLM must hold for the current version (None: never sync, e.g. an evaluation-only engine)."""

    def __init__(self, llm: LLM, api: VLLMApi, *, source: torch.nn.Module | None = None, version: int = 0) -> None:
        self.llm, self.api, self.source, self.version = llm, api, source, version
        self.synced: int | None = None  # the version stamp of the last transfer; None: transfer before generating
        self.syncs = 0

    def current_version(self) -> int:
        return self.version

    def set_version(self, version: int) -> None:
        self.version = version

    def bind(self, source: torch.nn.Module) -> VLLMEngine:
        """Sample with ``source``'s current weights: they are loaded before the next generation (a rebind always
        transfers, so weights changed under an unchanged version stamp, e.g. between distillation rounds, are never
        missed)."""
        self.source, self.synced = source, None
        return self

    def sync_weights(self) -> None:
        if self.source is None:
            raise RuntimeError("VLLMEngine.sync_weights: no source model bound; call bind(model) first")
        runner_model(self.llm).load_weights(named_weights(self.source))
        self.llm.reset_prefix_cache()  # cached KV was computed with the previous weights
        self.synced = self.version
        self.syncs += 1

    def params(self, request: TokenRequest, seed: int) -> Any:
        return self.api.sampling_params_cls(
            n=1, temperature=request.temperature, top_p=request.top_p, max_tokens=request.max_new_tokens,
            stop_token_ids=list(request.stop_ids), ignore_eos=True, logprobs=0, seed=seed, detokenize=False,
            skip_special_tokens=False)

    def generate(self, requests: Sequence[TokenRequest], *, generator: torch.Generator) -> list[TokenResult]:
        if not requests:
            raise ValueError("generate: no requests; pass at least one TokenRequest")
        if self.source is not None and self.synced != self.version:
            self.sync_weights()
        prompts = [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
        params = [self.params(r, request_seed(generator)) for r in requests]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        if len(outputs) != len(requests):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(requests)} requests")
        return [to_result(r, o, self.version) for r, o in zip(requests, outputs, strict=True)]


def set_launcher_env() -> None:
    """What ``external_launcher`` needs in a single process (kept when already set, e.g. by torchrun)."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if not os.environ.get("MASTER_PORT"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])


def build_llm(model: torch.nn.Module, settings: VLLMSettings, api: VLLMApi, workdir: Path) -> Any:
    """A ``vllm.LLM`` over ``model``'s architecture and current weights, saved to ``workdir`` in HF layout."""
    save_pretrained(model, workdir, safe_serialization=True)  # a LoRA model: its merged weights (repro.lora)
    set_launcher_env()
    return api.llm_cls(model=str(workdir), skip_tokenizer_init=True, logprobs_mode="processed_logprobs",
                       distributed_executor_backend="external_launcher", dtype=settings.dtype,
                       gpu_memory_utilization=settings.gpu_memory_utilization, max_model_len=settings.max_model_len,
                       max_num_seqs=settings.max_num_seqs, enforce_eager=settings.enforce_eager, seed=settings.seed)


class VLLMRollouts:
    """The ``RLSetup.engine_factory`` for ``rollout.engine = "vllm"``: ``(model, pad_id) -> engine``. The first call
    builds one ``vllm.LLM`` from the model; every call returns the same :class:`VLLMEngine` bound to that model."""

    def __init__(self, settings: VLLMSettings, *, api: VLLMApi | None = None) -> None:
        self.settings = settings
        self.api = api
        self.engine: VLLMEngine | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __call__(self, model: torch.nn.Module, pad_id: int) -> VLLMEngine:
        if self.engine is None:
            api = self.api
            if api is None:
                api = import_vllm()
                if not torch.cuda.is_available():
                        raise VLLMUnavailable("rollout.engine = 'vllm' needs a CUDA device (torch.cuda.is_available() "
                                          "is False); use rollout.engine = 'hf_sampler' on CPU")
            self._tmp = tempfile.TemporaryDirectory(prefix="tgsuite-vllm-")
            llm = build_llm(model, self.settings, api, Path(self._tmp.name))
            self.engine = VLLMEngine(llm, api)
        return self.engine.bind(model)
