"""Pretraining the mini base from nothing, on this machine: a curriculum that teaches in-context copying first.

Why. The mini world's agent must copy names from its context (the package in a listing, the exact line it edits).
A from-scratch 4M-parameter model trained only on a few hundred agent transcripts memorises names instead
(docs/RESULTS.md, "Runs at 2bec4a7 and before"). The paper starts from a pretrained coder; the mini world starts from a
base pretrained here by ``tgsuite train pretrain`` (``repro.pretrain.loop.run_pretrain``).

Curriculum (``repro.pretrain.schema.PretrainConfig.stages``; each stage a mixture of document kinds drawn per step):

- stage ``A1`` structured synthetic episodes (listing → read path → edit the exact line) whose names come from a
  small known pool (``repro.pretrain.synthetic``);
- stage ``A2`` copy-heavy: random-token repeats (induction), key → value recall, exact line copy, and the same
  episodes with unseen words (``repro.pretrain.words``);
- stage ``B`` the mini world's own text from the TRAIN split only (``repro.pretrain.world``), with stage A mixed in.

Every batch is a pure function of (config, step), so a resumed run sees exactly the batches an uninterrupted run
would (``repro.pretrain.mixture``). Probes on held-out probe sets (``repro.pretrain.probes``): induction on random
tokens, exact copy of unseen-word paths, exact copy of the ``old`` line of an edit.
"""
