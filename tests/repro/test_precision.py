"""The mixed-precision policy (repro.precision): fp32 master weights under bf16 autocast."""

from __future__ import annotations

import pytest
import torch

from repro.models import build_model
from repro.packing import pack, packed_nll
from repro.precision import autocast, check_precision, master_weights_ok

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _changed_share(model: torch.nn.Module, precision: str, lr: float) -> float:
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    docs = [(list(range(3, 60)), [1] * 57), (list(range(60, 3, -1)), [1] * 57)]
    with autocast(precision):  # type: ignore[arg-type]
        nll, n = packed_nll(model, pack(docs))
    (nll / n).backward()
    opt.step()
    moved = sum(int((p.detach() != b).sum()) for p, b in zip(model.parameters(), before, strict=True))
    return moved / sum(b.numel() for b in before)


def test_bf16_mixed_moves_every_parameter_at_small_lr() -> None:
    """The defect this policy fixes: parameters stored in bf16 ignore small updates; fp32 masters do not."""
    share_mixed = _changed_share(build_model("nano", 300, seed=0), "bf16-mixed", 1e-6)
    share_bf16 = _changed_share(build_model("nano", 300, seed=0).to(torch.bfloat16), "fp32", 1e-6)
    assert share_mixed > 0.95
    assert share_bf16 < 0.5


def test_master_weights_check_names_the_fix() -> None:
    master_weights_ok(build_model("nano", 300, seed=0), "bf16-mixed")
    with pytest.raises(ValueError, match="do not call model.to"):
        master_weights_ok(build_model("nano", 300, seed=0).to(torch.bfloat16), "bf16-mixed")


def test_unknown_policy_is_refused() -> None:
    assert check_precision("fp32") == "fp32"
    with pytest.raises(ValueError, match="bf16-mixed"):
        check_precision("fp16", where="model.precision")
