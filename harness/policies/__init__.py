"""Policies: what writes the assistant turns (``harness.interfaces.Policy``).

Named on the command line as:

- ``oracle``, ``null``, ``expert``: scripted policies (``harness.policies.scripted``);
- ``hf:<checkpoint dir>``: a transformers causal LM with its chat template (``harness.policies.hf.HFPolicy``);
- ``openai:<base url>#<model>``: an OpenAI-compatible chat-completions endpoint such as ``vllm serve``
  (``harness.policies.openai.OpenAIPolicy``), e.g. ``openai:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B``.

``make_policy(spec, **options)`` builds one; ``options`` go to the class (e.g. ``temperature=0.7``). Heavy imports
(torch, transformers) happen only for ``hf:``. ``build_arm_policy(spec, generation=..., endpoint=...)`` applies
run-wide ``GenerationSettings`` / ``EndpointSettings`` to the arms they concern.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.interfaces import Policy
from harness.schema import TaskInstance, TaskSet

SCRIPTED_CLASSES: dict[str, str] = {"oracle": "OraclePolicy", "null": "NullPolicy", "expert": "ScriptedExpert"}

SPEC_HELP = (
    "use one of: oracle, null, expert, hf:<checkpoint dir>, openai:<base url>#<model> "
    "(e.g. openai:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B)"
)


def parse_policy_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split a spec into (kind, fields) without building anything; raises ValueError naming the fix."""
    if spec in SCRIPTED_CLASSES:
        return spec, {}
    if spec.startswith("hf:"):
        path = spec[3:]
        if not path:
            raise ValueError(f"policy {spec!r}: give the checkpoint directory after 'hf:'; {SPEC_HELP}")
        return "hf", {"path": path}
    if spec.startswith("openai:"):
        base, sep, model = spec[len("openai:") :].rpartition("#")
        if not sep or not base or not model:
            raise ValueError(f"policy {spec!r}: write openai:<base url>#<model>; {SPEC_HELP}")
        return "openai", {"base_url": base, "model": model}
    raise ValueError(f"unknown policy {spec!r}; {SPEC_HELP}")


@dataclass(frozen=True)
class GenerationSettings:
    """Sampling settings given once for every model arm (``tgsuite eval --temperature/--top-p/--max-tokens``).

    ``None`` keeps the policy's own default. They apply to ``hf:`` (``max_tokens`` → ``max_new_tokens``) and
    ``openai:`` arms; scripted arms (oracle, null, expert) do not sample and take none of them.
    """

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    def options_for(self, kind: str) -> dict[str, Any]:
        """The constructor options of a policy of ``kind`` (from ``parse_policy_spec``); empty for scripted ones."""
        if kind not in ("hf", "openai"):
            return {}
        length = "max_new_tokens" if kind == "hf" else "max_tokens"
        opts = {"temperature": self.temperature, "top_p": self.top_p, length: self.max_tokens}
        return {k: v for k, v in opts.items() if v is not None}


@dataclass(frozen=True)
class EndpointSettings:
    """Options of ``openai:`` arms: the NAME of the environment variable holding the API key (the key itself is read
    from the environment when the policy is built, kept in memory only), the most requests in flight per arm, the
    seconds one request may take and the retries after a retryable failure (None: the policy's defaults, 120 s
    and 4)."""

    api_key_env: str | None = None
    max_concurrency: int | None = None
    request_timeout_s: float | None = None
    max_retries: int | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"--max-concurrency {self.max_concurrency}: must be >= 1")
        if self.request_timeout_s is not None and not self.request_timeout_s > 0:
            raise ValueError(f"--request-timeout {self.request_timeout_s}: must be > 0 seconds, e.g. 120")
        if self.max_retries is not None and self.max_retries < 0:
            raise ValueError(f"--max-retries {self.max_retries}: must be >= 0 (0 = one attempt)")

    def given(self) -> bool:
        return any(v is not None for v in asdict(self).values())

    def options(self) -> dict[str, Any]:
        """Constructor options for ``OpenAIPolicy``; raises ValueError when the named variable is unset or empty."""
        opts: dict[str, Any] = {}
        if self.api_key_env is not None:
            if not os.environ.get(self.api_key_env):
                raise ValueError(f"the environment variable {self.api_key_env!r} (named by --api-key-env) is not set; "
                                 f"fix: export {self.api_key_env}=<your key> before running")
            opts["api_key_env"] = self.api_key_env
        if self.max_concurrency is not None:
            opts["max_concurrency"] = self.max_concurrency
        if self.request_timeout_s is not None:
            opts["timeout_s"] = self.request_timeout_s
        if self.max_retries is not None:
            opts["max_retries"] = self.max_retries
        return opts


def build_arm_policy(spec: str, *, generation: GenerationSettings | None = None,
                     endpoint: EndpointSettings | None = None,
                     tasks: TaskSet | Iterable[TaskInstance] | str | Path | None = None) -> Policy:
    """``make_policy`` with the run-wide settings applied to the arms they concern (``oracle`` gets ``tasks``)."""
    kind, _ = parse_policy_spec(spec)
    options = (generation or GenerationSettings()).options_for(kind)
    if kind == "openai":
        options |= (endpoint or EndpointSettings()).options()
    if kind == "oracle":
        options["tasks"] = tasks
    return make_policy(spec, **options)


def make_policy(spec: str, **options: object) -> Policy:
    """Build the policy named by ``spec`` (module docstring); ``options`` are the class's constructor keywords,
    checked by the class."""
    kind, fields = parse_policy_spec(spec)
    if kind == "hf":
        from harness.policies.hf import HFPolicy

        return HFPolicy.from_pretrained(fields["path"], **options)
    if kind == "openai":
        from harness.policies.openai import OpenAIPolicy

        return OpenAIPolicy(fields["base_url"], fields["model"], **options)
    scripted = importlib.import_module("harness.policies.scripted")
    cls = getattr(scripted, SCRIPTED_CLASSES[kind], None)
    if cls is None:
        raise ValueError(f"policy {spec!r}: harness.policies.scripted has no {SCRIPTED_CLASSES[kind]}")
    policy: Policy = cls(**options)
    return policy
