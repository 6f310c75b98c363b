"""LoRA adapters (``peft``) on our Qwen3 models: ``[model.lora]`` in RL, ``SFTConfig.lora`` in SFT.

:func:`apply_lora` injects the adapters in place with ``peft.inject_adapter_in_model``: the model stays a
``Qwen3ForCausalLM`` (so ``model.model(...)``, ``get_output_embeddings`` and the KV sampler keep working), every base
parameter gets ``requires_grad=False`` and only the ``lora_A`` / ``lora_B`` matrices train. ``lora_B`` starts at zero,
so the adapted model at step 0 *is* the base model; ``lora_A`` is initialised under ``torch.random.fork_rng`` with
the given seed (the global RNG stream is left untouched). Adapters go on the listed projections of every layer
(:data:`TARGETS`); embeddings, norms and the ``lm_head`` stay the base's, so the KL's output projection is the same
tensor for the student and the teacher.

The teacher (METHOD §6.3, ``guidance.teacher``): ``live`` is the same adapted model with the hint in its context (no
second copy); ``fixed`` (θ_0) is the same model with its adapters switched off (:func:`adapters_disabled`) — exactly
θ_0, because θ_0 = base + 0; ``ema`` is refused (an EMA of the adapter matrices is not implemented).

Saving (:mod:`repro.checkpoint`): :func:`merged_state_dict` — base + B·A·(alpha/r) per adapted projection, under the
plain HF names — is what ``model.safetensors`` holds, so a LoRA checkpoint loads with ``from_pretrained`` like any
other; the adapters themselves are written to ``adapter/`` (``adapter_model.safetensors`` + ``adapter_config.json``,
peft's own format: ``peft.PeftModel.from_pretrained(base, ckpt_dir / "adapter")`` reads them), and resuming rebuilds
the base from the config and loads only the adapters (:func:`load_adapter_file`).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from repro.config import LORA_TARGETS as TARGETS
from repro.config import LoraCfg

# a sub-folder: with adapter_config.json beside the merged model.safetensors, transformers' from_pretrained loads the
# adapter on top of the merged weights (the adapters applied twice; checked with transformers 5.24 + peft 0.21.2)
ADAPTER_DIR = "adapter"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
_NAME = "default"  # peft's adapter name; one adapter per model here
_PEFT_PREFIX = "base_model.model."  # how a PeftModel names the wrapped model's parameters in its adapter file


def _lora_layers(model: nn.Module) -> Iterator[tuple[str, Any]]:
    if "peft" not in sys.modules:  # nothing imported peft, so no module can be a LoRA layer (and peft is optional)
        return
    from peft.tuners.lora import LoraLayer

    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            yield name, module


def has_lora(model: nn.Module) -> bool:
    """Whether ``model`` carries LoRA adapters (injected by :func:`apply_lora`)."""
    return next(_lora_layers(model), None) is not None


def peft_config(lora: LoraCfg) -> Any:
    """The ``peft.LoraConfig`` of a ``[model.lora]`` section."""
    from peft import LoraConfig

    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=list(lora.target_modules), bias="none")


def apply_lora(model: nn.Module, lora: LoraCfg, *, seed: int) -> nn.Module:
    """Inject LoRA adapters into ``model`` in place and freeze everything else; returns the same object."""
    try:
        from peft import inject_adapter_in_model
    except ImportError as exc:
        raise ImportError("model.lora.enabled needs peft: pip install 'tgsuite[lora]'") from exc
    if has_lora(model):
        raise ValueError("the model already carries LoRA adapters; apply_lora once per model")
    bad = sorted(set(lora.target_modules) - set(TARGETS))
    if bad:
        raise ValueError(f"lora.target_modules {list(lora.target_modules)}: choose a subset of {list(TARGETS)}")
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        inject_adapter_in_model(peft_config(lora), model, adapter_name=_NAME)
    model.to(device)
    return model


def prepare(model: nn.Module, lora: LoraCfg, *, seed: int) -> nn.Module:
    """``model`` with the configured adapters: injected when ``lora.enabled`` and not there yet; a model that
    already carries adapters must carry these (a mismatch raises)."""
    if not lora.enabled:
        if has_lora(model):
            raise ValueError("the model carries LoRA adapters but model.lora.enabled = false; set it to true with "
                             "the adapters' settings, or pass a model without adapters")
        return model
    if not has_lora(model):
        return apply_lora(model, lora, seed=seed)
    if lora_cfg_of(model) != lora:
        raise ValueError(f"the model's LoRA adapters ({lora_cfg_of(model)}) differ from model.lora ({lora}); "
                         "use the settings the adapters were built with")
    return model


def lora_cfg_of(model: nn.Module) -> LoraCfg:
    """The ``[model.lora]`` settings the model's adapters were built with (read back from its LoRA layers)."""
    layers = list(_lora_layers(model))
    if not layers:
        raise RuntimeError("lora_cfg_of: the model has no LoRA adapters")
    first = layers[0][1]
    drop = first.lora_dropout[_NAME]
    targets = {name.rsplit(".", 1)[-1] for name, _ in layers}
    return LoraCfg(enabled=True, r=first.r[_NAME], alpha=float(first.lora_alpha[_NAME]),
                   dropout=float(drop.p) if isinstance(drop, nn.Dropout) else 0.0,
                   target_modules=tuple(t for t in TARGETS if t in targets))


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the optimizer gets: all of them for full fine-tuning, the adapters' under LoRA."""
    return [p for p in model.parameters() if p.requires_grad]


@contextlib.contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """Run ``model`` as its base (the adapters' contribution switched off) inside the block (peft's
    ``enable_adapters``; the adapters' ``requires_grad`` is restored on exit)."""
    layers = [m for _, m in _lora_layers(model)]
    if not layers:
        raise RuntimeError("adapters_disabled: the model has no LoRA adapters")
    for m in layers:
        m.enable_adapters(False)
    try:
        yield
    finally:
        for m in layers:
            m.enable_adapters(True)


def effective_weight(linear: nn.Module) -> torch.Tensor:
    """The weight a projection applies: its own, or base + B·A·scale for a LoRA layer (adapters enabled), for code
    that reads weights directly instead of calling the module (``repro.sampler.KVSampler``)."""
    if "peft" not in sys.modules:
        return linear.weight
    from peft.tuners.lora import LoraLayer

    if not isinstance(linear, LoraLayer):
        return linear.weight
    base = linear.get_base_layer().weight
    if linear.disable_adapters or linear.merged:
        return base
    return base + sum(linear.get_delta_weight(a).to(base.dtype) for a in linear.active_adapters)


@torch.no_grad()
def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapted model's weights under the plain HF names (``…q_proj.weight``): what ``model.safetensors`` of a
    LoRA checkpoint holds. The model itself is left as it is (nothing is merged in place)."""
    merged = {f"{name}.weight": effective_weight(m).detach().clone() for name, m in _lora_layers(model)}
    out: dict[str, torch.Tensor] = {}
    for key, value in model.state_dict().items():
        if ".lora_" in key:
            continue
        plain = key.replace(".base_layer.", ".")
        out[plain] = merged.get(plain, value)
    return out


def save_pretrained(model: nn.Module, directory: Path, **kwargs: object) -> None:
    """``model.save_pretrained(directory)``; a LoRA model writes its merged weights (:func:`merged_state_dict`) and
    its adapters in peft's format under ``directory/adapter/`` (:func:`save_adapter`)."""
    if not has_lora(model):
        model.save_pretrained(directory, **kwargs)
        return
    model.save_pretrained(directory, state_dict=merged_state_dict(model), **kwargs)
    save_adapter(model, Path(directory) / ADAPTER_DIR)


def save_adapter(model: nn.Module, directory: Path) -> None:
    """Write the adapters in peft's format: ``adapter_model.safetensors`` + ``adapter_config.json`` (what
    ``peft.PeftModel.from_pretrained(base, directory)`` reads)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = get_peft_model_state_dict(model, adapter_name=_NAME)
    save_file({_PEFT_PREFIX + k: v.detach().contiguous() for k, v in state.items()}, str(directory / ADAPTER_WEIGHTS))
    peft_config(lora_cfg_of(model)).save_pretrained(str(directory))


def load_adapter_file(model: nn.Module, directory: Path) -> None:
    """Load a checkpoint's ``adapter/adapter_model.safetensors`` into ``model``'s adapters; a mismatch raises,
    naming the file."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(directory) / ADAPTER_DIR / ADAPTER_WEIGHTS
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the run trains LoRA adapters (model.lora.enabled) but this "
                                "checkpoint has none; resume from a checkpoint written with the same config")
    raw = load_file(str(path), device=str(next(model.parameters()).device))
    state = {k.removeprefix(_PEFT_PREFIX): v for k, v in raw.items()}
    expected = {n for n, p in model.named_parameters() if p.requires_grad}
    try:
        result = set_peft_model_state_dict(model, state, adapter_name=_NAME)
    except RuntimeError as exc:  # shape mismatch (another r or other targets)
        first = str(exc).splitlines()[1].strip() if "\n" in str(exc) else str(exc)
        raise RuntimeError(f"{path} does not match the model's adapters ({first}); resume with the same "
                           "model.lora settings") from exc
    missing = sorted(k for k in result.missing_keys if k in expected)
    if missing or result.unexpected_keys:
        raise RuntimeError(f"{path} does not match the model's adapters: missing {missing[:5]}, unexpected "
                           f"{list(result.unexpected_keys)[:5]}; resume with the same model.lora settings")


def adapter_config(directory: Path) -> dict[str, Any] | None:
    """The checkpoint's ``adapter/adapter_config.json`` (None when it has no adapters)."""
    p = Path(directory) / ADAPTER_DIR / ADAPTER_CONFIG
    return json.loads(p.read_text()) if p.is_file() else None
