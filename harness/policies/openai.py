"""``OpenAIPolicy``: any OpenAI-compatible chat-completions endpoint (``vllm serve``, SGLang, OpenAI, ...).

Transport: stdlib ``urllib`` (no extra dependency), ``POST {base_url}/chat/completions`` with a per-request timeout.
``base_url`` includes the API prefix, e.g. ``http://127.0.0.1:8000/v1``. The key is read from ``api_key`` or the
environment variable named by ``api_key_env`` (default ``OPENAI_API_KEY``); none is sent when neither is set.

Request: ``model``, ``messages`` (``harness.policies.openai_messages``: past assistant turns as assistant messages
with ``tool_calls`` and each observation as a ``tool`` message whose ``tool_call_id`` matches its call; with
``tool_role="user"``, for servers without tool support, assistant turns verbatim with their ``<tool_call>`` markup
and observations as ``<tool_response>`` blocks in a user message), ``tools``, ``temperature``, ``top_p``,
``max_tokens``, ``seed``
(drawn from the episode rng: vLLM honours per-request seeds), ``logprobs: true`` when ``logprobs`` is set and
vLLM's ``return_token_ids``/``return_tokens_as_token_ids`` when ``return_token_ids`` is set.

Response → ``PolicyOutput``: structured ``tool_calls`` (servers started with a tool parser strip them from
``content``) are written back as Qwen3 ``<tool_call>`` blocks, arguments verbatim (unparseable arguments stay
unparseable, so the harness sees the malformed call); ``reasoning_content`` becomes a ``<think>`` block. Per-token
log-probs come from ``choices[0].logprobs.content``; token ids from ``choices[0].token_ids`` or ``token_id:N``
token strings when the server provides them (else ``None``).

Time: each attempt waits at most ``timeout_s`` (``tgsuite eval --request-timeout``). The agent loop passes what is
left of the episode's wall-clock budget (``act(..., time_left_s=...)``): no attempt, back-off wait or wait for a
concurrency slot runs past it. When it cuts the first attempt (nothing failed, the answer was just not there in
time) ``harness.interfaces.PolicyDeadline`` is raised and the episode ends with a ``wall_time`` limit, exactly as
when a turn comes back after the limit; when the endpoint had already failed, the episode is an INFRA failure
(below). So set ``timeout_s`` below the wall-clock limit for a hung endpoint to count as infrastructure.

``preflight()`` sends one small request before any sandbox starts (``tgsuite eval`` does), so a wrong URL, model
name or key (401/403/404) fails once, naming the endpoint and the fix. ``generation_settings()`` is what every
request sends that shapes the samples (recorded per arm in the run manifest; a resume with other values is refused).

Failures: connection errors, timeouts, HTTP 408/409/429/5xx and unreadable bodies are retried with exponential
backoff (``backoff_s * 2**attempt``, capped at ``max_backoff_s``; ``max_retries`` retries, ``tgsuite eval --max-retries``). Then, or at once for
other HTTP errors (401, 404, a 400 that is not about context length), ``ModelEndpointError`` is raised: a
``harness.sandbox.SandboxUnavailable`` with ``kind="MODEL_ENDPOINT"``, i.e. an INFRA failure (HARNESS §7.6) that
the runner retries and never scores. A 400 saying the context length was exceeded is the agent's limit:
``finish_reason="context"``.

Concurrency: ``max_concurrency=N`` caps the requests this policy has in flight (a semaphore shared by every episode
of the arm), independently of how many episodes the runner runs at once; the wait counts in ``latency_s``.
The API key lives only in this object (never in ``spec``/``name``, so never in a manifest).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Literal

from pydantic import JsonValue

from harness.interfaces import PolicyDeadline, PolicyOutput
from harness.policies.openai_messages import to_openai_messages
from harness.sandbox import SandboxUnavailable
from harness.schema import Message, TurnFinishReason

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_CONTEXT_MARKERS = ("context length", "maximum context", "context_length_exceeded", "too many tokens",
                    "maximum model length")  # vLLM's engine: "The decoder prompt (length N) is longer than ..."


class ModelEndpointError(SandboxUnavailable):
    """The model endpoint failed (after retries, or with a non-retryable HTTP error): an INFRA failure."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1) -> None:
        super().__init__(message, kind="MODEL_ENDPOINT")
        self.status = status
        self.attempts = attempts


class _Retryable(Exception):
    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


def _is_timeout(exc: BaseException) -> bool:
    reason = getattr(exc, "reason", exc)
    return isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError)


def _fix_for(status: int) -> str:
    if status in (401, 403):
        return "fix: check the API key (--api-key-env names the variable that holds it; default OPENAI_API_KEY)"
    if status == 404:
        return ("fix: check the base URL (it ends in the API prefix, e.g. http://127.0.0.1:8000/v1) and the model "
                "name after '#' (the server's GET /v1/models lists them)")
    if status == 400:
        return ("fix: the server refused the request as invalid (its message above says why; vLLM needs "
                "--enable-auto-tool-choice --tool-call-parser NAME for requests with tools)")
    return "fix: check the base URL, the model name and the API key"


def _cut(deadline: float | None) -> str:
    return "; the episode's wall-clock limit ended the retries" if deadline is not None and \
        time.monotonic() >= deadline else ""


def render_tool_call(name: str, arguments: JsonValue) -> str:
    """A structured tool call as a Qwen3 ``<tool_call>`` block; argument strings are inserted verbatim when they
    are a JSON object, else kept as a JSON string (so a malformed call stays detectable)."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
            args = arguments if isinstance(parsed, dict) else json.dumps(arguments)
        except json.JSONDecodeError:
            args = arguments
    else:
        args = json.dumps(arguments, ensure_ascii=False)
    return '<tool_call>\n{"name": ' + json.dumps(name) + ', "arguments": ' + args + "}\n</tool_call>"


def response_text(message: dict[str, Any]) -> str:
    """Assistant text in harness form from a chat-completions ``message`` object."""
    content = message.get("content") or ""
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    text = f"<think>\n{reasoning.strip()}\n</think>\n\n{content}" if reasoning else content
    calls = [
        render_tool_call(tc.get("function", {}).get("name", ""), tc.get("function", {}).get("arguments", "{}"))
        for tc in message.get("tool_calls") or []
    ]
    if calls:
        text = (text.rstrip() + "\n" if text.strip() else "") + "\n".join(calls)
    return text


def _token_ids(choice: dict[str, Any], entries: list[dict[str, Any]]) -> list[int] | None:
    if isinstance(choice.get("token_ids"), list):
        return [int(t) for t in choice["token_ids"]]
    toks = [str(e.get("token", "")) for e in entries]
    if entries and all(t.startswith("token_id:") for t in toks):
        return [int(t.split(":", 1)[1]) for t in toks]
    return None


class OpenAIPolicy:
    """An OpenAI-compatible chat-completions endpoint as a ``harness.interfaces.Policy`` (module docstring).

    Stateless between calls, so one object may serve concurrent episodes (``thread_safe = True``)."""

    thread_safe = True
    accepts_time_left = True  # act(..., time_left_s=...): the agent loop's wall-clock budget bounds each request

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        name: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int = 1024,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        logprobs: bool = True,
        return_token_ids: bool = False,
        send_seed: bool = True,
        tool_role: Literal["tool", "user"] = "tool",
        extra_body: dict[str, Any] | None = None,
        max_concurrency: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"OpenAIPolicy: base_url {base_url!r} must start with http:// or https:// "
                             "(e.g. http://127.0.0.1:8000/v1)")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.spec = f"openai:{base_url}#{model}"
        self.model = model
        self.name = name or f"openai:{base_url}#{model}"
        self.api_key = api_key or os.environ.get(api_key_env)
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.logprobs, self.return_token_ids, self.send_seed = logprobs, return_token_ids, send_seed
        self.tool_role = tool_role
        self.extra_body = dict(extra_body or {})
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"OpenAIPolicy: max_concurrency must be >= 1 (or None for no limit), got {max_concurrency}")
        self.max_concurrency = max_concurrency
        self._slots = threading.BoundedSemaphore(max_concurrency) if max_concurrency else None
        self._sleep = sleep

    def _messages(self, messages: list[Message]) -> list[dict[str, Any]]:
        return to_openai_messages(messages, self.tool_role)

    def payload(self, messages: list[Message], tools: list[dict[str, Any]], rng: random.Random) -> dict[str, Any]:
        """The request body for one turn (draws the request seed from ``rng``)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self._messages(messages),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        seed = rng.getrandbits(31)
        if self.send_seed:
            body["seed"] = seed
        if tools:
            body["tools"] = tools
        if self.logprobs:
            body["logprobs"] = True
        if self.return_token_ids:
            body["return_token_ids"] = True
            body["return_tokens_as_token_ids"] = True
        body.update(self.extra_body)
        return body

    def _post(self, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:2000]
            if exc.code == 400 and any(k in detail.lower() for k in _CONTEXT_MARKERS):
                return {"_context_exceeded": detail}
            if exc.code in RETRYABLE_STATUS:
                raise _Retryable(f"HTTP {exc.code}: {detail[:300]}") from exc
            raise ModelEndpointError(f"{self.url}: HTTP {exc.code}: {detail[:500]} — {_fix_for(exc.code)}",
                                     status=exc.code) from exc
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:  # refused, reset, timeout, ...
            raise _Retryable(f"{type(exc).__name__}: {exc}", timed_out=_is_timeout(exc)) from exc
        try:
            data = json.loads(raw)
            data["choices"][0]["message"]  # noqa: B018 - shape check
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise _Retryable(f"unreadable response body: {raw[:200]!r}") from exc
        return data

    def _post_with_retries(self, body: dict[str, Any], deadline: float | None = None) -> dict[str, Any]:
        """POST with retries (module docstring). ``deadline`` (``time.monotonic()`` seconds): no attempt and no
        back-off wait runs past it; when it cuts the first attempt (no failure seen) ``PolicyDeadline`` is raised,
        when the endpoint had already failed it is a ``ModelEndpointError``."""
        last, tried = "", 0
        for attempt in range(self.max_retries + 1):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            tried += 1
            timeout = self.timeout_s if left is None else min(self.timeout_s, left)
            try:
                return self._post(body, timeout)
            except _Retryable as exc:
                if attempt == 0 and exc.timed_out and left is not None and left < self.timeout_s:
                    raise PolicyDeadline(f"{self.url}: no answer before the episode's wall-clock limit") from None
                last = str(exc)
                log.warning("%s: attempt %d/%d failed: %s", self.url, attempt + 1, self.max_retries + 1, last)
                if attempt < self.max_retries:
                    wait = min(self.max_backoff_s, self.backoff_s * 2**attempt)
                    self._sleep(wait if deadline is None else max(0.0, min(wait, deadline - time.monotonic())))
        if not last:
            raise PolicyDeadline(f"{self.url}: the episode's wall-clock limit was reached before the request")
        raise ModelEndpointError(
            f"{self.url}: no answer after {tried} attempts (last: {last}){_cut(deadline)}; is the server up "
            "(e.g. `vllm serve MODEL --port 8000`) and reachable?",
            attempts=tried,
        )

    def preflight(self, tools: list[dict[str, Any]] | None = None) -> None:
        """One small request (``max_tokens`` 1, no seed) before any episode: a wrong URL, model name or key fails
        here, once, naming the endpoint, instead of as an infrastructure error in every episode. Retryable
        failures (a server still starting) are retried as usual. Raises ``ModelEndpointError``."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": 1, "temperature": self.temperature,
                                "messages": [{"role": "user", "content": "Reply with OK."}]}
        if tools:
            body["tools"] = tools
        body.update({k: v for k, v in self.extra_body.items() if k not in body})
        self._post_with_retries(body)

    def generation_settings(self) -> dict[str, Any]:
        """What every request of this policy sends that shapes its samples (recorded in the run manifest; a resume
        with other values is refused). The key, the timeout and the retries are not among them."""
        return {"endpoint": self.url, "model": self.model, "temperature": self.temperature, "top_p": self.top_p,
                "max_tokens": self.max_tokens, "seed": "per request, from the episode seed" if self.send_seed else
                None, "logprobs": self.logprobs, "tool_role": self.tool_role,
                **({"extra_body": json.dumps(self.extra_body, sort_keys=True)} if self.extra_body else {})}

    def request_settings(self) -> dict[str, Any]:
        """How requests are made (recorded; they do not change what the model samples)."""
        return {"request_timeout_s": self.timeout_s, "max_retries": self.max_retries,
                "max_concurrency": self.max_concurrency}

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random,
            time_left_s: float | None = None) -> PolicyOutput:
        """One assistant turn. ``time_left_s``: what is left of the episode's wall-clock budget (the agent loop
        passes it, ``accepts_time_left``); the request, its retries and the wait for a concurrency slot stop there
        (``_post_with_retries``)."""
        body = self.payload(messages, tools, rng)
        t0 = time.perf_counter()
        deadline = None if time_left_s is None else time.monotonic() + time_left_s
        if self._slots is None:
            data = self._post_with_retries(body, deadline)
        else:
            # at most max_concurrency requests in flight, however many episodes run at once
            if not self._slots.acquire(timeout=None if deadline is None else max(0.0, deadline - time.monotonic())):
                raise PolicyDeadline(f"{self.url}: the wall-clock limit was reached waiting for a request slot")
            try:
                data = self._post_with_retries(body, deadline)
            finally:
                self._slots.release()
        latency = time.perf_counter() - t0
        if "_context_exceeded" in data:
            return PolicyOutput(text="", finish_reason="context", info={"detail": data["_context_exceeded"]})
        choice = data["choices"][0]
        entries = (choice.get("logprobs") or {}).get("content") or []
        lps = [float(e["logprob"]) for e in entries] if entries else None
        ids = _token_ids(choice, entries)
        if ids is not None and lps is not None and len(ids) != len(lps):
            log.warning("%s: %d token ids but %d logprobs; dropping both", self.url, len(ids), len(lps))
            ids = lps = None
        reasons: dict[str, TurnFinishReason] = {"tool_calls": "stop", "stop": "stop", "length": "length"}
        reason = reasons.get(choice.get("finish_reason"), "stop")
        return PolicyOutput(
            text=response_text(choice["message"]),
            token_ids=ids,
            logprobs=lps,
            finish_reason=reason,
            info={"usage": data.get("usage") or {}, "latency_s": latency, "seed": body.get("seed")},
        )
