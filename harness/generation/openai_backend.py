"""The OpenAI-compatible HTTP backend (``vllm serve``, llama.cpp's server, TGI, ...).

Requests run concurrently on ``concurrency`` daemon threads over one ``httpx.Client``. 429 and 5xx answers,
timeouts and dropped connections are retried with exponential backoff and jitter (honouring
``Retry-After``); other 4xx answers fail at once. A request that still fails is returned with
``finish_reason="error"`` and its reason, so a run never loses the stories that did finish.

A server that is down fails every request, each after its retries: ``down_after`` requests in a row that
failed so (no reply between them, not a 4xx that was the request's own fault) stop the backend with a
``BackendError`` naming the server, instead of working through the rest of the corpus a timeout at a time
(days, for a large run against a dead port); the stories done are kept and a rerun goes on from them.
"""

from __future__ import annotations

import json
import queue
import random
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from harness.errors import BackendError
from harness.generation.base import Backend, BackendInfo, GenParams, GenRequest, GenResult
from harness.generation.chat import chat_messages

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class OpenAIBackend(Backend):
    """Sends each request to ``{base_url}/chat/completions`` (or ``/completions`` without a chat
    template) with its own seed."""

    name = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        chat_template: bool = True,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        down_after: int | None = None,
    ) -> None:
        if not base_url:
            raise BackendError("model.base_url: the openai backend needs a server URL, e.g. http://127.0.0.1:8000/v1")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.chat = chat_template
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(
            timeout=httpx.Timeout(timeout_s),
            headers=headers,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self.retries = 0  # retried attempts, for the manifest's throughput block (generate_run reads it at the end)
        #: requests in a row that failed after every retry (a refused connection, a timeout, 429/5xx) before the
        #: backend calls the server down: twice the requests in flight at once, and at least 8
        self.down_after = down_after or max(8, 2 * concurrency)
        self._failing = 0  # such requests in a row so far (a reply of the server sets it to 0)
        self._last_failure = ""
        self._lock = threading.Lock()

    def info(self) -> BackendInfo:
        return BackendInfo(
            backend=self.name,
            model=self.model,
            extra={"base_url": self.base_url, "concurrency": self.concurrency},
        )

    def _body(self, req: GenRequest, params: GenParams) -> dict[str, object]:
        body: dict[str, object] = {
            "model": self.model,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "seed": req.seed,
            "n": 1,
        }
        if params.top_k > 0:
            body["top_k"] = params.top_k  # an extension vLLM and llama.cpp accept
        if params.stop:
            body["stop"] = list(params.stop)
        if req.json_schema is not None:  # OpenAI's structured outputs, which vLLM's server enforces too
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "reply", "schema": json.loads(req.json_schema)}}
        if self.chat:
            body["messages"] = chat_messages(req.prompt, req.system)
        else:
            body["prompt"] = req.prompt + "\n"
        return body

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(float(retry_after), self.max_backoff_s)
            except ValueError:
                pass
        return min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)

    def _one(self, req: GenRequest, params: GenParams, stop: threading.Event | None = None) -> GenResult:
        url = f"{self.base_url}/chat/completions" if self.chat else f"{self.base_url}/completions"
        body = self._body(req, params)
        last = ""
        stop = stop or threading.Event()
        for attempt in range(self.max_retries + 1):
            if stop.is_set():  # the caller stopped (Ctrl-C): no more tries, none of their waits
                return GenResult(req.request_id, "", "error", error=f"stopped before it was answered ({last or 'not sent'})")
            retry_after = None
            try:
                r = self.client.post(url, json=body)
                if r.status_code == 200:
                    text, reason, prompt_tokens, output_tokens = self._reply(r.json())
                    self._answered()
                    return GenResult(req.request_id, text, reason, prompt_tokens, output_tokens)
                last = f"HTTP {r.status_code}: {r.text[:200]}"
                if r.status_code not in RETRY_STATUS:
                    if req.system and "system" in r.text.casefold():  # a template without a system role (Gemma 2)
                        last += "; if the model's template has no system role, set model.system_message: in_user_turn"
                    break
                retry_after = r.headers.get("retry-after")
            except httpx.RequestError as e:  # a timeout, a dropped connection, a body that does not decode
                last = f"{type(e).__name__}: {e}"
            except (KeyError, IndexError, ValueError) as e:
                last = f"malformed response: {e}"
                break
            except Exception as e:  # noqa: BLE001 - anything else is this request's error, never the run's
                last = f"{type(e).__name__}: {e}"
                break
            if attempt < self.max_retries:
                self.retries += 1
                stop.wait(self._delay(attempt, retry_after))
        else:  # every attempt failed as a server that is down or overloaded fails
            with self._lock:
                self._failing += 1
                self._last_failure = last
            return GenResult(req.request_id, "", "error", error=last)
        self._answered()  # the server answered (a 4xx, a reply of the wrong shape): it is up
        return GenResult(req.request_id, "", "error", error=last)

    def _answered(self) -> None:
        with self._lock:
            self._failing = 0

    def _down(self) -> BackendError | None:
        """A BackendError naming the server once ``down_after`` requests in a row failed after their retries."""
        with self._lock:
            failing, last = self._failing, self._last_failure
        if failing < self.down_after:
            return None
        return BackendError(
            f"{self.base_url}: the server looks down: {failing} requests in a row failed, each after "
            f"{self.max_retries} retries (last: {last[:200]}); start it (or fix model.base_url) and "
            f"rerun: the stories done are kept")

    def _reply(self, data: Any) -> tuple[str, str, int, int]:
        """(text, finish reason, prompt tokens, output tokens) of a 200 reply; a ValueError (a malformed response,
        kept as the request's error) where its shape is not a completion's: a list, a null message, a text that is a
        number were TypeErrors and AttributeErrors that stopped the run with a traceback."""
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ValueError("no list of choices")
        choice = choices[0]
        if self.chat:
            message = choice.get("message")
            if not isinstance(message, dict) or "content" not in message:
                raise ValueError("choices[0].message has no content")
            text = message["content"]
        elif "text" in choice:
            text = choice["text"]
        else:
            raise ValueError("choices[0] has no text")
        if text is not None and not isinstance(text, str):
            raise ValueError(f"the text is a {type(text).__name__}, not a string")
        usage = data.get("usage")
        usage = usage if isinstance(usage, dict) else {}

        def tokens(key: str) -> int:  # a server may leave a count out, or null
            value = usage.get(key)
            return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

        # a server's content filter is kept as such: stored as "stop" it read as a story the model chose to end
        reason = choice.get("finish_reason") if choice.get("finish_reason") in ("length", "content_filter") else "stop"
        return text or "", reason, tokens("prompt_tokens"), tokens("completion_tokens")

    def generate(
        self, requests: Sequence[GenRequest], params: GenParams, *, progress: bool = False
    ) -> Iterator[GenResult]:
        if down := self._down():  # called down by an earlier call: no request is sent (each would wait out its retries)
            raise down
        todo: queue.SimpleQueue[GenRequest] = queue.SimpleQueue()
        results: queue.SimpleQueue[GenResult] = queue.SimpleQueue()
        for r in requests:
            todo.put(r)
        stop = threading.Event()

        def worker() -> None:
            while not stop.is_set():
                try:
                    req = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    results.put(self._one(req, params, stop))
                except BaseException as e:  # noqa: BLE001 - the caller waits for one result per request
                    results.put(GenResult(req.request_id, "", "error", error=f"{type(e).__name__}: {e}"))

        # daemon threads: the interpreter joined a pool's threads at exit, so Ctrl-C waited for every request in
        # flight to time out (120 s at the defaults), and before that for each one's retries
        for k in range(min(self.concurrency, len(requests))):
            threading.Thread(target=worker, name=f"harness-openai-{k}", daemon=True).start()
        finished = False
        try:
            for _ in range(len(requests)):
                yield results.get()
                if down := self._down():
                    stop.set()
                    # the replies already in hand are the caller's: dropped, a rerun would send them again (not the
                    # errors: "stopped before it was answered", of workers the stop woke, would hide why)
                    while True:
                        try:
                            r = results.get_nowait()
                        except queue.Empty:
                            break
                        if r.finish_reason != "error":
                            yield r
                    raise down
            finished = True
        finally:  # stopped (Ctrl-C, a failed write, the server called down): the requests not yet sent are dropped,
            # and those in flight are tried no more
            stop.set()
            if not finished:
                self.client.close()

    def close(self) -> None:
        self.client.close()
