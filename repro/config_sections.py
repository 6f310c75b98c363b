"""The configuration's base section and the sections that place and size a run at scale (``repro.config`` puts
them into ``TrainConfig``): ``cluster`` (FSDP placement and dry-run planning inputs), ``vllm`` (the colocated
engine), ``vllm_http`` (external ``vllm serve`` processes), ``shape`` (the dry-run's model shape)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class ConfigSection(BaseModel):
    """A frozen section of the training configuration: unknown keys and quoted numbers are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_quoted_numbers(cls, value: object, info: ValidationInfo) -> object:
        """A number or boolean written as a string (``lam = "0.3"``) is refused, not silently converted."""
        annotation = cls.model_fields[info.field_name].annotation if info.field_name else None
        if isinstance(value, str) and annotation in (int, float, bool):
            example = {int: "2", float: "0.3", bool: "true"}[annotation]
            raise ValueError(f"a {annotation.__name__} is written without quotes (e.g. {example}), not as the "
                             f"string {value!r}")
        return value


class ClusterCfg(ConfigSection):
    """Placement: ``fsdp`` and ``trainer_gpus`` are checked against the launch (``repro.distributed``); the other
    keys are planning inputs of ``--dry-run`` only, as each description says."""

    trainer_gpus: int = Field(1, ge=1, description="trainer processes: with fsdp the torchrun world size must equal "
                              "it; > 1 without fsdp is refused; also the sharding width of the --dry-run plan")
    inference_gpus: int = Field(0, ge=0, description="dry-run plan only (GPUs for a separate rollout engine; 0 = "
                                "colocated); with rollout.engine = 'hf_sampler' rollouts run in the trainer processes "
                                "(a warning)")
    gpu_memory_gb: float = Field(141.0, gt=0, description="dry-run plan only: memory per GPU")
    weight_sync: Literal["disk", "nccl"] = Field(
        "disk", description="dry-run plan only: how a separate rollout engine would receive weights; the "
        "hf_sampler engine under fsdp reads an all-gathered copy in the trainer processes")
    fsdp: bool = Field(False, description="train under torchrun + FSDP2 (repro.distributed): launch with "
                       "`torchrun --nproc-per-node <trainer_gpus> -m tgsuite train rl ...`")
    inference_tp: int = Field(1, ge=1, description="tensor-parallel size of one rollout-engine replica (plan only)")
    rollout_concurrency: int = Field(0, ge=0, description="sequences the rollout engines hold at once (plan: KV "
                                     "cache); 0 = rollout.groups x group_size")
    tokens_per_trajectory: int = Field(2048, ge=1, description="planning estimate of tokens per trajectory")
    failing_fraction: float = Field(0.5, ge=0, le=1, description="planning estimate: share needing a teacher pass")


class VllmCfg(ConfigSection):
    """The colocated vLLM engine (``rollout.engine = "vllm"``, ``repro.vllm_engine``); ignored by other engines."""

    gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="share of the GPU vLLM may take (weights + "
                                          "KV cache); the trainer shares the GPU, so keep it well below 1")
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="vLLM's compute dtype; the trainer keeps fp32 masters, so bf16 log-probs differ "
                                "from the trainer's by rounding (scripts/gpu_check.sh prints the largest difference)")
    max_model_len: int = Field(0, ge=0, description="0 = rollout.max_context_tokens + rollout.max_new_tokens")
    enforce_eager: bool = Field(True, description="no CUDA graphs: faster start, slower decode")
    max_num_seqs: int = Field(0, ge=0, description="sequences decoded at once; 0 = rollout.groups x group_size")


class VllmHttpCfg(ConfigSection):
    """External ``vllm serve`` processes (``rollout.engine = "vllm_http"``, ``repro.vllm_http``); ignored by other
    engines."""

    urls: tuple[str, ...] = Field(("http://127.0.0.1:8000",), min_length=1, description="base URLs of the servers "
                                  "(requests spread round-robin; every server gets every weight push)")
    weights_dir: str | None = Field(None, description="the directory every server was started from (`vllm serve "
                                    "DIR`), shared with the trainer: it writes model.safetensors there and asks the "
                                    "servers to reload it")
    model: str = Field("", description="the served model name; '' = the first of GET /v1/models")
    push_dtype: Literal["bfloat16", "float16", "float32"] = Field("bfloat16", description="dtype of pushed weights")
    timeout_s: float = Field(600.0, gt=0, description="per HTTP request")
    concurrency: int = Field(64, ge=1, description="completion requests in flight at once")


class ShapeCfg(ConfigSection):
    """Model shape for the dry-run plan; all 0 = take it from the model preset."""

    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    vocab: int = 0
    intermediate: int = 0
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    tie_embeddings: bool = False
