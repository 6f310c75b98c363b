"""A fake ``vllm serve`` on loopback speaking the wire format ``repro.vllm_http`` uses, for CPU tests.

What it copies from vLLM's OpenAI-compatible server (v0.22-0.31; ``vllm/entrypoints/openai/protocol.py``
``CompletionRequest`` / ``CompletionResponse``, ``vllm/entrypoints/serve/dev`` for the dev-mode endpoints):

- ``POST /v1/completions``: ``prompt`` as a list of token ids; the sampling fields the engine sends (an unknown
  field is a 400 here, so a typo cannot pass unnoticed — vLLM itself ignores unknown fields with a warning);
  ``logprobs`` (an int ≥ 0) gives ``choices[0].logprobs`` with ``tokens``, ``token_logprobs``, ``top_logprobs``,
  ``text_offset``; ``return_token_ids`` adds ``choices[0].token_ids``; ``return_tokens_as_token_ids`` names the
  tokens ``token_id:<id>``; ``finish_reason`` ``stop`` / ``length`` and ``stop_reason`` (the stop id);
- ``GET /v1/models``: ``{"data": [{"id": <served name>, ...}]}``;
- dev mode only (``VLLM_SERVER_DEV_MODE=1``; 404 otherwise): ``GET /server_info?config_format=json`` with
  ``vllm_config.model_config.{model, logprobs_mode}``; ``POST /collective_rpc`` with ``{"method": "reload_weights"}``
  re-reads the weights from the directory the server was started from (as vLLM's workers' ``reload_weights``);
  ``POST /reset_prefix_cache``.

Sampling is the CPU fake of ``tests/vllm_fakes.py`` (``FakeLLM``: vLLM's stop-check order, ``logprobs_mode``), so a
request's seed draws exactly what our own engines would; that is a property of the fake, not of vLLM.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from vllm_fakes import FakeLLM, SamplingParams

COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop_token_ids", "ignore_eos",
                     "logprobs", "echo", "return_token_ids", "return_tokens_as_token_ids", "skip_special_tokens",
                     "n", "stop", "top_k", "min_p", "stream"}


class FakeServer:
    """``vllm serve DIR`` on 127.0.0.1 (a free port); ``url`` is its base URL. Use as a context manager."""

    def __init__(self, directory: Path, *, name: str = "policy", dev_mode: bool = True,
                 logprobs_mode: str = "processed_logprobs") -> None:
        self.directory, self.name, self.dev_mode = Path(directory), name, dev_mode
        self.logprobs_mode = logprobs_mode
        self.llm = FakeLLM(str(directory), logprobs_mode=logprobs_mode, skip_tokenizer_init=False)
        self.lock = threading.Lock()  # one forward at a time (the fake model is not thread-safe)
        self.reloads = self.prefix_resets = 0
        self.bodies: list[dict[str, Any]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def reload_weights(self) -> None:
        from safetensors.torch import load_file

        tensors = load_file(str(self.directory / "model.safetensors"))
        self.llm.runner.load_weights(tensors.items())
        self.reloads += 1

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        unknown = sorted(set(body) - COMPLETION_FIELDS)
        if unknown:
            return 400, {"error": f"unknown fields {unknown}"}
        if body.get("model") != self.name:
            return 404, {"error": f"The model `{body.get('model')}` does not exist."}
        prompt = body["prompt"]
        if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
            return 400, {"error": "this fake takes token-id prompts only"}
        sp = SamplingParams(temperature=body.get("temperature", 1.0), top_p=body.get("top_p", 1.0),
                            seed=body.get("seed"), stop_token_ids=body.get("stop_token_ids"),
                            ignore_eos=body.get("ignore_eos", False), max_tokens=body.get("max_tokens", 16),
                            logprobs=body.get("logprobs"), detokenize=False)
        with self.lock:
            self.bodies.append(body)
            out = self.llm.generate([{"prompt_token_ids": prompt}], sampling_params=sp, use_tqdm=False)[0]
        comp = out.outputs[0]
        choice: dict[str, Any] = {"index": 0, "text": "", "finish_reason": comp.finish_reason,
                                  "stop_reason": comp.stop_reason}
        if body.get("return_token_ids"):
            choice["token_ids"] = comp.token_ids
        if body.get("logprobs") is not None:
            named = [f"token_id:{t}" if body.get("return_tokens_as_token_ids") else f"<{t}>" for t in comp.token_ids]
            choice["logprobs"] = {"tokens": named,
                                  "token_logprobs": [e[t].logprob for e, t in zip(comp.logprobs, comp.token_ids,
                                                                                   strict=True)],
                                  "top_logprobs": [{n: e[t].logprob} for n, e, t in zip(named, comp.logprobs,
                                                                                        comp.token_ids, strict=True)],
                                  "text_offset": [0] * len(named)}
        return 200, {"id": "cmpl-fake", "object": "text_completion", "model": self.name, "choices": [choice],
                     "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(comp.token_ids)}}

    def handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def reply(self, code: int, payload: Any) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/v1/models":
                    return self.reply(200, {"object": "list", "data": [{"id": server.name, "object": "model",
                                                                         "root": str(server.directory)}]})
                if self.path.startswith("/server_info") and server.dev_mode:
                    return self.reply(200, {"vllm_config": {"model_config": {
                        "model": str(server.directory), "logprobs_mode": server.logprobs_mode}}})
                return self.reply(404, {"detail": "Not Found"})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path == "/v1/completions":
                    return self.reply(*server.complete(body))
                if self.path == "/collective_rpc" and server.dev_mode:
                    if body.get("method") != "reload_weights":
                        return self.reply(400, {"detail": f"this fake knows reload_weights, not {body.get('method')}"})
                    with server.lock:
                        server.reload_weights()
                    return self.reply(200, {"results": [None]})
                if self.path == "/reset_prefix_cache" and server.dev_mode:
                    server.prefix_resets += 1
                    return self.reply(200, {})
                return self.reply(404, {"detail": "Not Found"})

        return Handler
