"""Policies: what writes the assistant turns (``harness.interfaces.Policy``).

Named on the command line as:

- ``oracle``, ``null``, ``expert``: scripted policies (``harness.policies.scripted``);
- ``hf:<checkpoint dir>``: a transformers causal LM with its chat template (``harness.policies.hf.HFPolicy``);
- ``openai:<base url>#<model>``: an OpenAI-compatible chat-completions endpoint such as ``vllm serve``
  (``harness.policies.openai.OpenAIPolicy``), e.g. ``openai:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B``.

``make_policy(spec, **options)`` builds one; ``options`` go to the class (e.g. ``temperature=0.7``). Heavy imports
(torch, transformers) happen only for ``hf:``.
"""

from __future__ import annotations

import importlib
from typing import Any

from harness.interfaces import Policy

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


def make_policy(spec: str, **options: Any) -> Policy:
    """Build the policy named by ``spec`` (module docstring)."""
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
