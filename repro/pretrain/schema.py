"""Typed records of pretraining: the config (model, optimisation, curriculum), probe scores and the manifest."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.policies.expert_test_view import TestView
from repro.precision import Precision

DocKind = Literal["repeat", "kv", "line", "episode", "episode_known", "world"]


class Restart(BaseModel):
    """A stage that opens a new phase: it starts from the previous phase's weights rounded to bfloat16 (what
    ``export_base`` ships), with a fresh AdamW and a learning-rate schedule of its own (linear warm-up to ``lr``,
    constant, linear decay over the phase's last ``decay_frac`` to ``min_lr_ratio``·lr). So a run that goes through
    the phase boundary and a run continued from the shipped base of the phase before are the same run."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    lr: float = Field(gt=0)
    warmup_steps: int = Field(ge=0)
    decay_frac: float = Field(ge=0, le=1)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)


class Stage(BaseModel):
    """One curriculum stage: ``steps`` optimizer steps, each batch a mixture of document kinds by ``mix`` weight."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    steps: int = Field(ge=1)
    mix: dict[DocKind, float] = Field(min_length=1, description="document kind -> weight (normalised)")
    restart: Restart | None = Field(None, description="this stage opens a new phase (see Restart)")

    @model_validator(mode="after")
    def _weights(self) -> Stage:
        if any(w < 0 for w in self.mix.values()) or sum(self.mix.values()) <= 0:
            raise ValueError(f"stage {self.name}: mix weights must be >= 0 with a positive sum, got {self.mix}.")
        return self


class WorldCorpus(BaseModel):
    """Stage B's source: the mini world's TRAIN split (``repro.pretrain.world``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    repos: int = Field(24, ge=1, description="train-split repositories generated for the corpus")
    tasks_per_repo: int = Field(4, ge=1)
    episodes: int = Field(192, ge=1, description="expert episodes collected once (renamed afresh at every use)")
    hint_share: float = Field(0.3, ge=0, le=1)
    seed: int = 1
    test_view: TestView = Field("read", description="how the expert looks at the visible tests "
                                                 "(harness.policies.expert_test_view); the shipped base saw `read`")

    def recipe_dump(self) -> dict:
        """The fields that decide the corpus, as JSON; a ``read`` view is left out, so that a world written before
        ``test_view`` existed (the shipped base's) hashes as it did then."""
        return self.model_dump(mode="json", exclude={"test_view"} if self.test_view == "read" else None)


class PretrainConfig(BaseModel):
    """Everything that decides a pretraining run's result; its hash (``recipe_sha256``) is the data recipe."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    model: Literal["nano", "mini"] = "mini"
    vocab_size: int = Field(4096, ge=300)
    tokenizer_docs: int = Field(600, ge=10, description="synthetic documents (plus the world sample) the BPE "
                                "tokenizer is trained on")
    tokenizer_split: Literal["qwen3", "words"] = Field("words", description="the BPE pre-tokenizer (repro.tokenizer): words "
                                            "= names tokenise the same after any punctuation; qwen3 = Qwen3's split")
    precision: Precision = "bf16-mixed"
    batch_tokens: int = Field(16384, ge=64, description="tokens per optimizer step (packed)")
    max_doc_len: int = Field(2048, ge=16)
    lr: float = Field(2e-3, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_steps: int = Field(100, ge=0)
    decay_frac: float = Field(0.2, ge=0, le=1, description="warmup-stable-decay: the last share of all steps "
                              "decays linearly to min_lr_ratio·lr")
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    stages: tuple[Stage, ...] = Field(min_length=1)
    world: WorldCorpus = WorldCorpus()
    probe_every: int = Field(50, ge=1)
    probe_docs: int = Field(64, ge=4)
    checkpoint_every_s: float = Field(300.0, gt=0)
    seed: int = 0
    torch_threads: int = Field(2, ge=1)

    @model_validator(mode="after")
    def _unique(self) -> PretrainConfig:
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}.")
        if self.stages[0].restart is not None:
            raise ValueError(f"stage {names[0]}: the first stage cannot restart (there is no phase before it).")
        return self

    def phases(self) -> list[tuple[int, int, Restart | None]]:
        """[(first step, end step, the Restart that opened it, None for the first phase)] in order."""
        out: list[tuple[int, int, Restart | None]] = []
        step = 0
        for st in self.stages:
            if not out or st.restart is not None:
                out.append((step, step, st.restart))
            a, _, r = out[-1]
            step += st.steps
            out[-1] = (a, step, r)
        return out

    def phase_prefix(self, end_step: int) -> PretrainConfig | None:
        """The recipe made of the stages before the phase that starts at ``end_step`` (None if no phase starts
        there): a shipped base whose recipe is this prefix's, at ``end_step``, is where that phase begins."""
        step = 0
        for i, st in enumerate(self.stages):
            if st.restart is not None and step == end_step:
                return self.model_copy(update={"stages": self.stages[:i]})
            step += st.steps
        return None

    @property
    def total_steps(self) -> int:
        return sum(s.steps for s in self.stages)

    def stage_at(self, step: int) -> Stage:
        """The stage that step ``step`` (0-based) belongs to."""
        for s in self.stages:
            if step < s.steps:
                return s
            step -= s.steps
        raise ValueError(f"step beyond the curriculum ({self.total_steps} steps).")

    def recipe_sha256(self) -> str:
        """sha256 of everything that decides the data and the optimisation (not threads or checkpoint timing)."""
        d = self.model_dump(mode="json", exclude={"torch_threads", "checkpoint_every_s"})
        # a stage without a restart hashes as before the field existed (the shipped base's recipe stays valid)
        d["stages"] = [st.model_dump(mode="json", exclude_defaults=True) for st in self.stages]
        d["world"] = self.world.recipe_dump()
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


class ProbeScores(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    step: int
    tokens_seen: int
    induction: float = Field(description="token accuracy on the second copy of held-out random-token runs")
    path_exact: float = Field(description="share of held-out episodes whose read_file path is copied exactly")
    old_exact: float = Field(description="share of held-out episodes whose edit_file old line is copied exactly")
    loss: dict[str, float] = Field(default_factory=dict, description="mean target NLL per probe kind")


class PretrainState(BaseModel):
    """``pretrain_state.json`` beside the checkpoints: where the run is (readable without torch)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    recipe_sha256: str
    step: int
    tokens_seen: int
    wall_s: float
    stage: str
    probes: list[ProbeScores] = Field(default_factory=list)
    status: Literal["running", "done"] = "running"


class BaseManifest(BaseModel):
    """``manifest.json`` of a shipped base (``repro.pretrain.ship``): where it came from and how to verify it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["tgsuite-pretrained-base"] = "tgsuite-pretrained-base"
    model: str
    recipe_sha256: str
    step: int
    total_steps: int
    tokens_seen: int
    wall_s: float = Field(description="training time of the run, all sessions together")
    probes: ProbeScores | None
    commit: str | None = Field(description="git commit of the code that exported it")
    created_at: str
    dtype: Literal["bfloat16"] = "bfloat16"
    files: dict[str, str] = Field(description="file name -> sha256 of every file of the base but this manifest")
