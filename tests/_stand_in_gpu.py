"""The meta device as a stand-in GPU, so that code which would mix devices on a GPU fails on the CPU (issue 40).

On a CUDA device a CPU tensor may meet a device tensor only as a 0-dim scalar, as an index (``x[idx]``,
``x[idx] = v``) or in a copy (``.to``, ``copy_``); anything else raises "Expected all tensors to be on the same
device". The CPU alone cannot show that: every tensor is on the CPU. Inside :func:`stand_in_gpu`, with the model and
the inputs moved to ``"meta"`` (models with :func:`to_stand_in`, so tied weights stay tied as on a GPU; the device
the code under test should use throughout):

- a call that receives a meta tensor and a CPU tensor with dimensions, or a CPU ``torch.Generator``, raises
  :class:`DeviceMix` (CUDA's rule above, and ``torch.multinomial``'s refusal of a generator of another device; the
  embedding's indices included, which meta alone would accept);
- reading a meta tensor's value (``item``, ``float``, ``int``, ``bool``, ``tolist``, ``torch.equal``) gives zeros
  of its shape, and a copy from meta to the CPU gives ones of its shape (a probability row a sampler can draw from),
  so the code runs on: its shapes and devices are real, its values are not (``nonzero`` and a boolean mask, whose
  results' shapes depend on the values, count every element as nonzero);
- ``torch.autocast`` on ``"meta"`` does nothing (autocast has no meta backend).

Only devices are checked here; the numbers computed inside mean nothing. Torch's function modes hold for the thread
that enters them: a thread started inside the block needs :func:`thread_checks` in its target.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

DEVICE = "meta"
MIXING_ALLOWED = frozenset({"__getitem__", "__setitem__", "index_put_", "to", "copy_", "cpu", "__repr__",
                            "__format__", "__get__", "_has_compatible_shallow_copy_type"})
VALUE_READS = frozenset({"item", "__float__", "__int__", "__bool__", "__index__", "tolist"})


class DeviceMix(RuntimeError):
    """A call that a CUDA device would refuse: a device tensor and a CPU tensor with dimensions together."""


def _is_cpu_copy(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if name == "cpu":
        return True
    if name != "to":
        return False
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    if isinstance(target, torch.Tensor):
        target = target.device
    if isinstance(target, (str, torch.device)):
        return torch.device(target).type == "cpu"
    return False


class _StandIn(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name not in MIXING_ALLOWED:
            _refuse_a_mix(name or str(func), tree_leaves((args, kwargs)))
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and first.device.type == DEVICE:
            if name in VALUE_READS:
                return getattr(torch.zeros(first.shape, dtype=first.dtype), name)()
            if name == "equal":  # both read as zeros (and are on one device: checked above)
                return True
            if _is_cpu_copy(name, args, kwargs):
                dtype = kwargs.get("dtype") or next((a for a in args[1:] if isinstance(a, torch.dtype)), first.dtype)
                return torch.ones(first.shape, dtype=dtype)
        return func(*args, **kwargs)


def _refuse_a_mix(name: str, leaves: list[Any]) -> None:
    tensors = [a for a in leaves if isinstance(a, torch.Tensor)]
    gens = [a for a in leaves if isinstance(a, torch.Generator)]
    kinds = {a.device.type for a in tensors if a.dim() > 0} | {g.device.type for g in gens}
    if DEVICE in kinds and "cpu" in kinds:
        raise DeviceMix(f"{name}: " + ", ".join([f"{a.device.type}{tuple(a.shape)}" for a in tensors]
                                               + [f"generator on {g.device.type}" for g in gens])
                        + " (a GPU refuses a CPU tensor with dimensions, or a CPU generator, here)")


class _Autocast(torch.autocast):
    """``torch.autocast`` that does nothing on the stand-in device."""

    def __init__(self, device_type: str, *args: Any, **kwargs: Any) -> None:
        self._stand_in = device_type == DEVICE
        if not self._stand_in:
            super().__init__(device_type, *args, **kwargs)

    def __enter__(self) -> None:
        if not self._stand_in:
            super().__enter__()

    def __exit__(self, *exc: object) -> None:
        if not self._stand_in:
            super().__exit__(*exc)


def to_stand_in(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` moved to the stand-in device with its tied weights tied again: a move from the CPU to CUDA keeps a
    tied parameter one object, a move to meta makes two (``nn.Module._apply`` cannot swap a CPU tensor's data for a
    meta one), which would hand the code under test an untied model. Move models with this before the block."""
    model.to(DEVICE)
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        model.tie_weights()
    return model


def thread_checks() -> TorchFunctionMode:
    """The device checks and value reads alone, for a thread the code under test starts inside the block (torch's
    function modes are per thread): ``with thread_checks(): ...`` in that thread's target."""
    return _StandIn()


@contextmanager
def stand_in_gpu() -> Iterator[str]:
    """The checks of the module docstring, for the block; yields the device name to move things to."""
    from torch.fx.experimental import _config as fx_config

    real, nonzero = torch.autocast, fx_config.meta_nonzero_assume_all_nonzero
    torch.autocast = _Autocast  # type: ignore[misc]
    fx_config.meta_nonzero_assume_all_nonzero = True  # torch's own switch for meta's nonzero (and boolean masks)
    try:
        with _StandIn():
            yield DEVICE
    finally:
        torch.autocast = real  # type: ignore[misc]
        fx_config.meta_nonzero_assume_all_nonzero = nonzero
