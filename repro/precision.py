"""Mixed-precision policy: what the parameters, the optimizer state and the matmuls are stored and run in.

Two policies, chosen once in a config (``precision = "fp32" | "bf16-mixed"``):

- ``fp32``: everything in float32 (the reference).
- ``bf16-mixed``: parameters, gradients and AdamW moments stay float32 (the master copy); forward and backward run
  under ``torch.autocast(dtype=torch.bfloat16)``, so matmuls and attention run in bf16 (on CPUs with AMX, oneDNN's
  AMX kernels; measure with ``ONEDNN_VERBOSE=1``), while autocast keeps reductions such as softmax, log-softmax and
  norms in float32. The log-probabilities that the losses use are computed in float32 from bf16 logits
  (``repro.losses``).

Why a master copy matters: a bf16 parameter has 8 bits of mantissa, so an update smaller than ~1/256 of its value
rounds to nothing. Training parameters stored *in* bf16 (``model.to(torch.bfloat16)``) at a learning rate of 1e-6
changed only ~2 % of a model's parameters in one AdamW step; with an fp32 master copy every parameter moves.

Not covered: fp16 (needs loss scaling; no CPU kernels worth it) and fp8.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import torch

Precision = Literal["fp32", "bf16-mixed"]
PRECISIONS: tuple[str, ...] = ("fp32", "bf16-mixed")


def check_precision(value: str, *, where: str = "precision") -> Precision:
    """``value`` as a :data:`Precision`, or a ``ValueError`` that names the field and the choices."""
    if value not in PRECISIONS:
        raise ValueError(f"{where} = {value!r} is not a precision policy; choose one of {list(PRECISIONS)} "
                         "(bf16-mixed: fp32 master weights and optimizer state, bf16 matmuls under autocast).")
    return value  # type: ignore[return-value]


def device_type_of(model: torch.nn.Module) -> str:
    """``"cuda"`` or ``"cpu"``: where the model's first parameter lives (autocast needs the device type)."""
    p = next(model.parameters(), None)
    return "cpu" if p is None else p.device.type


@contextlib.contextmanager
def autocast(precision: Precision, device_type: str = "cpu") -> Iterator[None]:
    """The forward/backward context of ``precision``: bf16 autocast for ``bf16-mixed``, nothing for ``fp32``."""
    if precision == "fp32":
        yield
        return
    with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
        yield


def master_weights_ok(model: torch.nn.Module, precision: Precision) -> None:
    """Raise if ``precision`` promises fp32 master weights but some trainable parameter is stored in a lower
    precision (the defect this module exists to prevent)."""
    if precision not in ("fp32", "bf16-mixed"):
        return
    low = [n for n, p in model.named_parameters() if p.requires_grad and p.dtype != torch.float32]
    if low:
        raise ValueError(f"precision={precision!r} keeps parameters in float32, but {len(low)} trainable parameters "
                         f"are stored in a lower precision (first: {low[0]}). Fix: build the model in float32 and let "
                         "autocast run the matmuls in bf16; do not call model.to(torch.bfloat16) before training.")
