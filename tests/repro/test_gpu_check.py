"""repro.gpu_check and scripts/gpu_check.sh (run on a lent GPU machine): their CPU parts. The argument parsing and
the plan, the exit statuses without a GPU (2) and without pydantic (3), the log-prob bound, and every part end to end
on the CPU at toy sizes (the vLLM part over the fake of vLLM's objects in tests/vllm_fakes.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from repro import gpu_check
from repro.gpu_check import PARTS, chosen_parts, main, parser, run_parts
from repro.gpu_check_rl import LogprobStats

ROOT = Path(__file__).resolve().parents[2]


def test_the_plan_lists_every_part_in_order_within_eight_minutes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[1] for ln in lines[:-1]] == ["rl", "throughput", "kl", "lora", "fsdp", "vllm"]
    assert sum(p.budget_s for p in PARTS) <= 460 and "total budget 460 s" in lines[-1]


def test_parts_are_parsed_in_the_fixed_order_and_unknown_ones_refused() -> None:
    assert [p.name for p in chosen_parts("kl, rl")] == ["rl", "kl"]
    with pytest.raises(SystemExit, match="unknown part"):
        chosen_parts("rl,warp")
    args = parser().parse_args([])
    assert (args.temperature, args.top_p, args.kl_rows, args.kl_vocab, args.vocab) == (0.7, 0.7, 16384, 151936,
                                                                                       151936)


def test_without_cuda_it_exits_2_and_without_pydantic_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    assert main(["--out", str(tmp_path / "a")]) == 2
    assert json.loads((tmp_path / "a" / "gpu_check.json").read_text())["status"] == "unavailable"
    monkeypatch.setitem(sys.modules, "pydantic", None)
    assert main(["--out", str(tmp_path / "b")]) == 3
    summary = json.loads((tmp_path / "b" / "gpu_check.json").read_text())
    assert summary["status"] == "missing_dependency" and "pydantic" in summary["reason"]


def test_the_logprob_bound_counts_tokens_outside_the_nucleus_apart() -> None:
    s = LogprobStats(precision="bf16-mixed", tokens=4)
    s.add(torch.tensor([-1.0, -2.0, -3.0, -0.5]), torch.tensor([-1.01, -2.03, float("-inf"), -0.5]))
    assert (s.compared, s.outside_nucleus) == (3, 1) and s.max_diff == pytest.approx(0.03)
    assert s.summary()["mean_abs_logprob_diff"] == pytest.approx(0.04 / 3)
    assert s.violations(0.05, 0.5) == []
    bad = s.violations(0.01, 0.1)
    assert any("mean" in b for b in bad) and any("outside" in b for b in bad)
    assert LogprobStats(precision="fp32").violations(1, 1) == ["no sampled token could be compared with the trainer"]


def test_at_the_default_sampling_settings_raw_logprobs_break_the_bound() -> None:
    """The comparison is meaningful: an engine reporting the model's raw log-softmax instead of the processed
    distribution's log-probs (vLLM's default logprobs_mode) fails the default bound by far."""
    import _rl_fixtures as F

    from harness.policies.sampling import draw, sampling_logprobs
    from repro.engine import TokenRequest
    from repro.gpu_check_rl import trainer_logprobs

    args = parser().parse_args([])
    model = F.setup(seed=0).model
    gen = torch.Generator().manual_seed(0)
    stats = LogprobStats(precision="fp32")
    for start in range(8):
        req = TokenRequest([1, 5 + start, 9], 16, (2,), args.temperature, args.top_p)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([list(req.prompt_ids)])).logits[0, -1:].float()
        tok = int(draw(sampling_logprobs(logits, temperature=req.temperature, top_p=req.top_p), gen)[0])
        raw = torch.log_softmax(logits, -1)[0, tok:tok + 1]
        stats.tokens += 1
        stats.add(raw, trainer_logprobs(model, req, [tok], "fp32"))
    assert stats.summary()["mean_abs_logprob_diff"] > 0.3
    assert stats.violations(args.max_mean_logprob_diff, args.max_outside_nucleus)


def tiny_args(tmp_path: Path) -> Namespace:
    return parser().parse_args([
        "--out", str(tmp_path), "--preset", "nano", "--groups", "2", "--group-size", "2", "--max-new-tokens", "6",
        "--precision", "fp32", "--tokens", "256", "--doc-tokens", "96", "--train-steps", "1", "--layers", "1",
        "--vocab", "1000", "--kl-rows", "48", "--kl-vocab", "1000", "--kl-hidden", "16", "--kl-chunk", "16"])


def _fsdp_in_a_child(args: Namespace, out: Path, device: str) -> dict:
    """The real ``run_fsdp`` in a fresh interpreter: its gloo group's threads (TCPStore, gloo loops) outlive
    ``destroy_process_group`` in the process that made them, and a later fork in the test process (a sandbox's
    ``preexec_fn``) could then deadlock on a lock one of them held."""
    import json
    import pickle
    import subprocess
    import sys

    code = ("import json, pickle, sys; from pathlib import Path; from repro.gpu_check_parts import run_fsdp; "
            "a = pickle.loads(sys.stdin.buffer.read()); "
            "print('RESULT ' + json.dumps(run_fsdp(a, Path(sys.argv[1]), device=sys.argv[2])))")
    proc = subprocess.run([sys.executable, "-c", code, str(out), device], input=pickle.dumps(args),
                          capture_output=True, cwd=Path(__file__).resolve().parents[2], timeout=600)
    line = next((ln for ln in proc.stdout.decode().splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(proc.stderr.decode()[-3000:])
    return json.loads(line[len("RESULT "):])


def test_every_part_runs_on_the_cpu_at_toy_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vllm_fakes import FakeVLLM

    from repro.gpu_check_rl import run_vllm

    torch.set_num_threads(1)
    args = tiny_args(tmp_path)
    summary: dict = {"parts": {}}
    fake = FakeVLLM().api()

    def runner(part):  # the real functions; vllm over the fake (vLLM itself needs CUDA)
        if part.name == "vllm":
            return lambda a, o, device: run_vllm(a, o, api=fake, device=device)
        if part.name == "fsdp":
            return _fsdp_in_a_child
        return getattr(__import__(part.module, fromlist=[part.func]), part.func)

    code = run_parts(list(PARTS), args, tmp_path, summary, device="cpu", runner=runner)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[gpu_check]")]
    parts = json.loads((tmp_path / "gpu_check.json").read_text())["parts"]
    assert code == 0, {k: v.get("error") for k, v in parts.items()}
    assert [ln.split()[1].rstrip(":") for ln in lines] == [p.name for p in PARTS]
    assert all(p["status"] == "ok" for p in parts.values())
    rl = parts["rl"]
    # the sampler samples from the trainer's own weights in fp32 at T=0.7, top-p=0.7: they agree
    assert rl["tokens"] > 0 and rl["logprob_tokens_compared"] > 0 and rl["mean_abs_logprob_diff"] < 1e-4
    assert all(n > 0 for n in rl["kl_tokens"])
    assert parts["throughput"]["tokens_per_s"] > 0 and parts["throughput"]["mfu"] is None  # no spec peak for a CPU
    kl = parts["kl"]
    assert kl["loss_rel_diff"] < 1e-3 and kl["chunked"]["s"] > 0  # chunked equals naive
    assert parts["lora"]["adapters_moved"] == parts["lora"]["adapters"] > 0 and parts["lora"]["base_unchanged"]
    assert parts["fsdp"]["dcp_files"] and len(parts["fsdp"]["loss"]) == 2
    assert parts["vllm"]["weight_syncs"] == 2 and parts["vllm"]["staleness_max"] == [0, 0]


def test_a_failing_part_is_recorded_and_the_next_still_runs(tmp_path: Path) -> None:
    def runner(part):
        if part.name == "rl":
            def boom(a, o, device):
                raise RuntimeError("kaput")
            return boom
        return lambda a, o, device: {"status": "skipped", "reason": "skipped: test"}

    summary: dict = {"parts": {}}
    assert run_parts(list(PARTS[:2]), tiny_args(tmp_path), tmp_path, summary, device="cpu", runner=runner) == 1
    assert summary["parts"]["rl"]["error"] == "RuntimeError: kaput"
    assert summary["parts"]["throughput"]["status"] == "skipped"


def test_vllm_is_skipped_not_failed_without_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from repro.gpu_check_rl import run_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)
    assert run_vllm(tiny_args(tmp_path), tmp_path, device="cpu") == {"status": "skipped",
                                                                     "reason": "skipped: no vLLM"}
    line = gpu_check.one_line("vllm", {"status": "skipped", "reason": "skipped: no vLLM"})
    assert line == "[gpu_check] vllm: skipped: no vLLM"  # said once


def script_env(tmp_path: Path, tools: tuple[str, ...]) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        found = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        if found.startswith("/"):
            (bin_dir / tool).symlink_to(found)
    return {"PATH": str(bin_dir), "OUT": str(tmp_path / "out")}


def test_the_script_stops_clearly_without_a_gpu(tmp_path: Path) -> None:
    env = script_env(tmp_path, ("dirname", "mkdir", "grep", "printf"))
    res = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "gpu_check.sh")], env=env, capture_output=True,
                         text=True)
    assert res.returncode == 2 and "no NVIDIA GPU" in res.stderr
    assert json.loads((tmp_path / "out" / "gpu_check.json").read_text())["status"] == "unavailable"


def test_the_script_exits_3_without_pydantic_or_its_wheels(tmp_path: Path) -> None:
    env = script_env(tmp_path, ("dirname", "mkdir", "grep", "printf", "ls"))
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/bash\necho 'GPU 0: Fake (UUID: x)'\n")
    (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
    (tmp_path / "bin" / "python3").write_text("#!/bin/bash\nexit 1\n")  # an interpreter without pydantic
    (tmp_path / "bin" / "python3").chmod(0o755)
    if list((ROOT / ".whl").glob("*.whl")):
        pytest.skip("this checkout carries wheels in .whl/")
    res = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "gpu_check.sh")], env=env, capture_output=True,
                         text=True)
    assert res.returncode == 3 and "no wheels" in res.stderr
    assert json.loads((tmp_path / "out" / "gpu_check.json").read_text())["status"] == "missing_dependency"
