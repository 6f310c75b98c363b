"""Which weights the hint-conditioned teacher runs (METHOD §6.3 item 6, §6.9, §9 item 4): ``guidance.teacher``.

- ``"live"`` (default, the paper's "same weights"): the teacher forward uses the student's current weights θ_k.
  No copy is held; :func:`build_teacher` returns ``None`` and the loss root calls its own model under no_grad.
- ``"fixed"`` (arm ``tg_fixed_teacher``, as OPSD's ``--fixed_teacher``): a frozen copy of θ_0, the weights the RL run
  started from (the SFT checkpoint / RL init). It never changes.
- ``"ema"`` (arm ``tg_ema_teacher``, as SDPO / TRL ``teacher_model_kind="ema"``): θ_T = θ_0 at the start and
  θ_T ← (1−r)·θ_T + r·θ after every optimizer step (r = ``guidance.teacher_ema_rate``, default 0.05), so after K steps
  θ_T = (1−r)^K·θ_0 + Σ_k r·(1−r)^(K−k)·θ_k. Buffers (e.g. rotary frequencies) are copied, not averaged.

Cost of ``fixed`` / ``ema``: one more parameter copy in the model's dtype (P·2 bytes in bf16, P·4 in fp32), no
gradients and no optimizer state for it; FLOPs are unchanged (still one teacher forward per micro-batch with KL rows);
``ema`` adds one elementwise lerp over the parameters per step. The copy is a submodule of
:class:`repro.trainer_step.LossRoot` (so one FSDP wrap of the root covers it, SCALE §2.5), has ``requires_grad=False``,
is not in the optimizer, is not part of the student's ``save_pretrained`` files, and is saved next to them as
``teacher.safetensors`` so ``--resume`` is exact (``repro.checkpoint``). The teacher copy runs in the same train/eval
mode as the student (the nano/mini presets have no dropout), so only the weights differ from the live teacher.
With LoRA adapters (``[model.lora]``, :mod:`repro.lora`) no copy is ever made: ``live`` is the same adapted model
with the hint in its context; ``fixed`` is the same model with its adapters switched off for the teacher forward
(:func:`teacher_context`) — exactly θ_0, since the adapters start at B = 0 and only they train; ``ema`` is refused
(an EMA of the adapter matrices is not implemented; ``repro.config`` rejects the combination).
Not covered: a teacher "at rollout time" (the behaviour policy's weights under async staleness, METHOD §9 item 4).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Literal

import torch
from torch import nn

from repro.lora import adapters_disabled, has_lora

TeacherKind = Literal["live", "ema", "fixed"]


def build_teacher(lm: nn.Module, kind: TeacherKind) -> nn.Module | None:
    """A frozen copy of ``lm`` for ``"ema"`` / ``"fixed"`` (``None`` for ``"live"``, and for ``"fixed"`` when ``lm``
    carries LoRA adapters: that teacher is ``lm`` with its adapters off, :func:`teacher_context`)."""
    if kind == "live":
        return None
    if kind not in ("ema", "fixed"):
        raise ValueError(f"guidance.teacher = {kind!r}: unknown teacher; use 'live', 'ema' or 'fixed'")
    if has_lora(lm):
        if kind == "ema":
            raise ValueError("guidance.teacher = 'ema' with LoRA adapters is not implemented (an EMA of the adapter "
                             "weights); use guidance.teacher = 'live' or 'fixed'")
        return None
    teacher = copy.deepcopy(lm)
    teacher.requires_grad_(False)
    return teacher


@torch.no_grad()
def ema_update_(teacher: nn.Module, student: nn.Module, rate: float) -> None:
    """θ_T ← (1−rate)·θ_T + rate·θ in place, parameter by parameter (tied parameters are updated once)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"guidance.teacher_ema_rate = {rate}: must be in (0, 1]")
    t_params, s_params = dict(teacher.named_parameters()), dict(student.named_parameters())
    if t_params.keys() != s_params.keys():
        raise RuntimeError("the ema teacher and the student have different parameters; the teacher must be a copy of "
                           "the student made by repro.teacher.build_teacher")
    for name, t in t_params.items():
        s = s_params[name].detach()
        if t.dtype in (torch.float32, torch.float64):
            t.lerp_(s.to(t.dtype), rate)
        else:  # bf16/fp16: average in fp32, store in the model dtype (the stored teacher is rounded every step)
            t.copy_(t.float().lerp_(s.float(), rate))
    for (tn, tb), (sn, sb) in zip(teacher.named_buffers(), student.named_buffers(), strict=True):
        if tn != sn:
            raise RuntimeError(f"teacher buffer {tn} does not match student buffer {sn}")
        tb.copy_(sb)


def teacher_context(lm: nn.Module, kind: TeacherKind) -> contextlib.AbstractContextManager[None]:
    """What to run the teacher forward of ``lm`` itself under: adapters off for a LoRA model's ``"fixed"`` teacher
    (the base = θ_0), nothing otherwise."""
    if kind == "fixed" and has_lora(lm):
        return adapters_disabled(lm)
    return contextlib.nullcontext()


def update_teacher_(teacher: nn.Module | None, student: nn.Module, kind: TeacherKind, rate: float) -> None:
    """The per-step teacher update: EMA for ``"ema"``, nothing for ``"fixed"`` / ``"live"``."""
    if kind == "ema":
        if teacher is None:
            raise RuntimeError("guidance.teacher = 'ema' but no teacher copy was built")
        ema_update_(teacher, student, rate)
