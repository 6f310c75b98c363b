"""``rollout/tool_call_validity`` in the per-step training metrics: valid tool calls / tool calls over the step's
assistant turns (``harness.tools.parse_tool_calls``, the definition of ``harness.metrics``), None without a call."""

from __future__ import annotations

from repro.rl_metrics import rollout_metrics as _rollout_metrics
from repro.rollout import EnvOutcome, RolloutSample
from repro.tokenizer import EncodedConversation

GOOD = '<tool_call>\n{"name": "finish", "arguments": {"message": "done"}}\n</tool_call>'
BAD_JSON = '<tool_call>\n{"name": "finish", "arguments": {"message": \n</tool_call>'
UNKNOWN = '<tool_call>\n{"name": "format_disk", "arguments": {}}\n</tool_call>'


def _sample(texts: list[str]) -> RolloutSample:
    return RolloutSample(item=0, index=0, instance_id="t",
                         encoded=EncodedConversation([1], [1], [0], [0], [0], [0.0], [0]), texts=texts, verdicts=["NA"] * len(texts),
                         truncated_turns=[False] * len(texts), outcome=EnvOutcome(resolved=False))


def test_validity_counts_calls_not_turns() -> None:
    # 5 calls (one turn with two, one turn with none, which does not count): 2 valid
    groups = [[_sample([GOOD + "\n" + BAD_JSON, "no call here"]), _sample([UNKNOWN, "<think>\n" + GOOD + "\n</think>"])],
              [_sample([GOOD, "<tool_call>\n{\"name\": \"finish\""])]]
    m = _rollout_metrics(groups)
    # calls: GOOD, BAD_JSON | UNKNOWN (a call inside <think> is not a call) | GOOD, unclosed
    assert m["rollout/tool_call_validity"] == 2 / 5


def test_validity_is_none_without_any_call() -> None:
    assert _rollout_metrics([[_sample(["plain text"])]])["rollout/tool_call_validity"] is None
