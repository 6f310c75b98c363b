"""Small stand-ins shared by the training-loop tests: a tokenizer trained in-process, a nano model and a pure-Python
environment (no sandbox, no Docker) whose reward depends on what the policy writes."""

from __future__ import annotations

import random
from pathlib import Path

from harness.schema import Message, TaskInstance
from repro.config import TrainConfig, load_config
from repro.models import build_model
from repro.rollout import EnvOutcome, StepOut
from repro.tokenizer import train_tokenizer
from repro.train import RLSetup

CORPUS = [
    "You are a coding agent. Fix the bug in the repository and call finish with a summary.",
    "# Summary\n- fixed `add` in `calc.py`\n- ran the tests",
    "<think>\nlook at calc.py first\n</think>\n<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\": \"done\"}}\n</tool_call>",
    "Reminder: format your reply to the user in Markdown.",
    "ok. tests passed. fix applied. the bug was an off by one error in the loop.",
] * 20

_TOKENIZER = None


def tokenizer():
    global _TOKENIZER
    if _TOKENIZER is None:
        _TOKENIZER = train_tokenizer(CORPUS, vocab_size=400, min_frequency=1)
    return _TOKENIZER


def tasks(n: int = 3) -> list[TaskInstance]:
    return [TaskInstance(instance_id=f"toy-{i}", repo="toy", base_commit="0", problem_statement=f"Fix bug {i} in calc.py",
                         patch="", test_patch="", FAIL_TO_PASS=["t::x"], split="train") for i in range(n)]


class ToyEnv:
    """Two turns at most; 'resolved' iff the policy's text contains the letter 'f' at least twice."""

    def __init__(self, instance: TaskInstance, seed: int) -> None:
        self.instance, self.turns, self.texts = instance, 0, []

    def reset(self) -> list[Message]:
        return [Message(role="system", content="You are a coding agent."),
                Message(role="user", content=self.instance.problem_statement)]

    def step(self, text: str) -> StepOut:
        self.turns += 1
        self.texts.append(text)
        done = self.turns >= 2
        return StepOut([] if done else [Message(role="tool", content="ok", tool_name="run_tests")], done)

    def outcome(self) -> EnvOutcome:
        return EnvOutcome(resolved=sum(t.count("f") for t in self.texts) >= 2)

    def close(self) -> None:
        pass


def toy_checker(messages: list[Message]) -> list[str]:
    out = []
    for m in messages:
        if len(m.content) < 8:
            out.append("NA")
        else:
            out.append("PASS" if "#" in m.content else "FAIL")
    return out


def hint_text(instance: TaskInstance, turn: int, rng: random.Random) -> str:
    return "Reminder: format your reply to the user in Markdown."


def setup(seed: int = 0) -> RLSetup:
    tok = tokenizer()
    model = build_model("nano", len(tok), seed=seed, pad_token_id=tok.pad_token_id,
                        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
    return RLSetup(tokenizer=tok, model=model, tasks=tasks(), make_env=ToyEnv, checker=toy_checker,
                   hint_text=hint_text)


def config(arm: str = "tg", *sets: str) -> TrainConfig:
    base = ["run.steps=2", "run.progress=false", "rollout.groups=2", "rollout.group_size=3", "rollout.max_turns=2",
            "rollout.max_new_tokens=12", "model.threads=1", "optim.lr=0.003", "optim.micro_batch=4", "guidance.chunk_size=16"]
    return load_config(arm=arm, sets=base + list(sets))


def metrics(path: Path) -> list[dict]:
    import json

    return [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
