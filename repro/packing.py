"""Packed sequences: many documents in one forward, no attention across documents, loss only where it belongs.

A *document* is ``(ids, act)``: token ids and a mask of the same length, ``act[t] > 0`` when token ``t`` is a
training target (predicted from tokens ``< t`` of the same document; ``act[0]`` is never used). The value is the
target's class, kept in ``Packed.classes`` so one forward can serve several loss terms (SFT: 1 = assistant token,
2 = an observation token of the auxiliary context loss). Pretraining documents mark every token, or only the part a
task asks to produce.

``pack(docs, max_doc_len=...)`` concatenates the documents into one row of ``N`` tokens and returns a
:class:`Packed` batch: ``input_ids [1, N]``; ``position_ids [1, N]`` restarting at 0 for every document (RoPE sees
each document's own positions); ``targets [1, N]``, the next token where it is a target of the same document and
``IGNORE`` (-100) elsewhere; and ``cu_seqlens``, the document boundaries. The forward (``packed_hidden``) runs the
model with the ``tg_packed`` attention implementation registered here: every projection and MLP matmul runs over
all ``N`` tokens at once (the part that gains from batching, and from bf16 on AMX), while attention runs as causal
``scaled_dot_product_attention`` inside each document, so no token attends across a document boundary and no
``[N, N]`` mask is ever built (a block-diagonal mask made sdpa fall back to a path 2x slower than one sequence at
a time on this CPU, measured in ``benchmarks/train_throughput_bench.py`` while writing this). There is no padding.

A test checks that the per-token log-probabilities of a packed batch equal those of each document run alone.
Documents longer than ``max_doc_len`` are cut into pieces, each starting at position 0 (the later pieces lose the
earlier context); ``Packed.n_split`` counts them so callers can report it.

The RL trainer packs its micro-batches the same way (``repro.trainer_step.collate`` with ``padding_free``; the
student's sequences and the teacher's hint-spliced views each in one row) and runs them through
:func:`packed_forward`.

The document boundaries travel with the forward call, as its keyword ``tg_cu_seqlens`` (transformers hands a model's
extra keywords down to every attention call), never in thread-local state: with activation checkpointing the
backward recomputes each layer's forward, and on a GPU the autograd engine runs that backward on its own device
thread, not the thread that called the forward (tests/repro/test_activation_checkpointing.py runs a backward in
another thread). transformers' checkpointed layers keep the keywords of the original call for the recompute.

Not covered: batched generation (the sampler keeps ``sdpa`` with its padding masks; the packed implementation is
switched on only for the duration of a packed forward).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from repro.losses import chunked_token_logprobs
from repro.models import lm_head_weight

IGNORE = -100
ATTN_IMPL = "tg_packed"
CU_KWARG = "tg_cu_seqlens"  # the forward keyword that carries the document boundaries

Document = tuple[Sequence[int], Sequence[int]]


@dataclass(frozen=True)
class Packed:
    input_ids: torch.Tensor      # [1, N] long
    position_ids: torch.Tensor   # [1, N] long, 0.. per document
    targets: torch.Tensor        # [1, N] long, IGNORE where no loss
    classes: torch.Tensor        # [1, N] long, act value of the target (0 where no loss)
    cu_seqlens: tuple[int, ...]  # document boundaries, 0 .. N
    n_docs: int
    n_split: int

    @property
    def n_tokens(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def n_targets(self) -> int:
        return int((self.targets != IGNORE).sum())


def _pieces(ids: Sequence[int], act: Sequence[int], max_len: int) -> list[tuple[list[int], list[int]]]:
    if len(ids) != len(act):
        raise ValueError(f"a document's ids ({len(ids)}) and act mask ({len(act)}) differ in length.")
    ids, act = list(ids), list(act)
    return [(ids[s:s + max_len], act[s:s + max_len]) for s in range(0, len(ids), max_len)]


def pack(docs: Sequence[Document], *, max_doc_len: int = 1 << 20) -> Packed:
    """Concatenate ``docs`` (in order) into one packed row; documents longer than ``max_doc_len`` are split."""
    if max_doc_len < 2:
        raise ValueError(f"max_doc_len={max_doc_len}: a document piece needs at least 2 tokens.")
    ids_all: list[int] = []
    pos_all: list[int] = []
    tgt_all: list[int] = []
    cls_all: list[int] = []
    cu, n_split = [0], 0
    for ids, act in docs:
        pieces = [p for p in _pieces(ids, act, max_doc_len) if p[0]]
        n_split += len(pieces) > 1
        for p_ids, p_act in pieces:
            n = len(p_ids)
            ids_all += p_ids
            pos_all += range(n)
            tgt_all += [y if a else IGNORE for y, a in zip(p_ids[1:], p_act[1:], strict=True)] + [IGNORE]
            cls_all += [int(a) for a in p_act[1:]] + [0]
            cu.append(cu[-1] + n)
    if not ids_all:
        raise ValueError("pack() got no tokens: pass at least one non-empty document.")
    as_row = lambda xs: torch.tensor(xs, dtype=torch.long).unsqueeze(0)  # noqa: E731
    return Packed(as_row(ids_all), as_row(pos_all), as_row(tgt_all), as_row(cls_all), tuple(cu), n_docs=len(docs),
                  n_split=n_split)


def packed_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, dropout: float = 0.0,
                             scaling: float | None = None, **kwargs: object) -> tuple[torch.Tensor, None]:
    """Causal sdpa inside each document of the call's ``tg_cu_seqlens`` (query/key/value [1, H, N, D]); GQA by
    repeating the key/value heads. Returns [1, N, H, D] like transformers' sdpa implementation."""
    cu = kwargs.get(CU_KWARG)
    if cu is None:
        raise RuntimeError(f"the tg_packed attention needs the documents' boundaries as the forward's `{CU_KWARG}` "
                           "keyword: run packed batches through repro.packing.packed_forward().")
    assert isinstance(cu, tuple)
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    outs = [F.scaled_dot_product_attention(query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], dropout_p=dropout,
                                           is_causal=e - s > 1, scale=scaling)
            for s, e in zip(cu[:-1], cu[1:], strict=True)]
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTN_IMPL, packed_attention_forward)


@contextlib.contextmanager
def packed_attention(model: torch.nn.Module) -> Iterator[None]:
    """Switch ``model``'s attention to the ``tg_packed`` implementation inside this block (the implementation
    before is restored on exit, so blocks nest). The block switches the implementation only; each forward passes its
    documents itself (:func:`packed_forward`). With activation checkpointing the backward recomputes the layers'
    forwards: run it inside the same block (``repro.train.optimizer_step`` does)."""
    cfg = model.config
    before = cfg._attn_implementation
    cfg._attn_implementation = ATTN_IMPL
    try:
        yield
    finally:
        cfg._attn_implementation = before


def packed_forward(model: torch.nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor,
                   cu_seqlens: tuple[int, ...]) -> torch.Tensor:
    """Final-norm hidden states [1, N, d] of one packed row (attention inside each document of ``cu_seqlens``
    only; ``position_ids`` restart at 0 in every document)."""
    with packed_attention(model):
        out = model.model(input_ids=input_ids, position_ids=position_ids, attention_mask=None, use_cache=False,
                          **{CU_KWARG: cu_seqlens})
    return out.last_hidden_state


def packed_hidden(model: torch.nn.Module, batch: Packed) -> torch.Tensor:
    """Final-norm hidden states [1, N, d] of a packed batch (attention inside each document only)."""
    return packed_forward(model, batch.input_ids, batch.position_ids, batch.cu_seqlens)


def packed_token_logprobs(model: torch.nn.Module, batch: Packed) -> tuple[torch.Tensor, torch.Tensor]:
    """(float32 log π(target) at every target position in order; those positions as an index into [N]).
    Full [N, V] logits never exist (``repro.losses.chunked_token_logprobs``)."""
    h = packed_hidden(model, batch)[0]
    flat_t = batch.targets[0]
    where = (flat_t != IGNORE).nonzero(as_tuple=True)[0]
    if where.numel() == 0:
        return h.new_zeros(0, dtype=torch.float32), where
    lp, _ = chunked_token_logprobs(h[where], lm_head_weight(model), flat_t[where])
    return lp.float(), where


def packed_nll(model: torch.nn.Module, batch: Packed) -> tuple[torch.Tensor, int]:
    """(Σ −log π over the batch's targets, their count)."""
    lp, where = packed_token_logprobs(model, batch)
    return -lp.sum(), int(where.numel())
