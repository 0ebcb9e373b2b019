"""The three generation backends, each against a real engine on the embedded model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from harness.config import ModelConfig
from harness.generation import load_backend
from harness.generation.base import GenParams, GenRequest
from harness.generation.openai_backend import OpenAIBackend

PROMPT = "Write a story, 100 words or less, of an American doctor who works an overtime shift at the ICU."
SAMPLED = GenParams(temperature=1.0, top_p=0.95, max_tokens=24)


def check_seeded(backend):
    """Same seed -> same story, whatever else is in the batch; different seeds differ."""
    reqs = [GenRequest(f"r{i}", PROMPT, seed=100 + i % 3) for i in range(6)]
    out = {r.request_id: r for r in backend.generate(reqs, SAMPLED)}
    assert set(out) == {r.request_id for r in reqs}
    assert out["r0"].text == out["r3"].text and out["r1"].text == out["r4"].text
    assert len({out[f"r{i}"].text for i in range(3)}) == 3
    for r in out.values():
        assert r.text.strip() and r.finish_reason in {"stop", "length"}
        assert 0 < r.output_tokens <= 24 and r.prompt_tokens > 20
    alone = list(backend.generate([GenRequest("x", PROMPT, seed=101)], SAMPLED))[0]
    assert alone.text == out["r1"].text
    greedy = [r.text for r in backend.generate([GenRequest("g1", PROMPT, 1), GenRequest("g2", PROMPT, 2)], GenParams(temperature=0, max_tokens=12))]
    assert greedy[0] == greedy[1]
    return out


@pytest.mark.slow
def test_transformers_backend_gguf_and_safetensors(smollm2_dir):
    # The GGUF straight from the package...
    gguf = load_backend(ModelConfig(backend="transformers", path=str(_gguf()), batch_size=4, max_model_len=256))
    try:
        out = check_seeded(gguf)
        assert gguf.info().extra["dtype"] == "float32"
        check_json_schema(gguf)
        b = list(gguf.generate([GenRequest("a", PROMPT, 0)], GenParams(temperature=0, max_tokens=16)))[0].text
    finally:
        gguf.close()
    # ...and the prepared safetensors directory hold the same weights: same greedy text.
    st = load_backend(ModelConfig(backend="transformers", path=str(smollm2_dir), batch_size=4))
    try:
        a = list(st.generate([GenRequest("a", PROMPT, 0)], GenParams(temperature=0, max_tokens=16)))[0].text
        assert a == b
        stopped = list(st.generate([GenRequest("s", PROMPT, 5)], GenParams(temperature=1.0, max_tokens=24, stop=(" the ",))))[0]
        assert " the " not in stopped.text
    finally:
        st.close()
    assert out


def _gguf():
    from harness.models import embedded

    return embedded("smollm2-135m").gguf_path()


@pytest.mark.slow
def test_vllm_offline_engine_on_cpu(smollm2_dir):
    b = load_backend(ModelConfig(backend="vllm", path="smollm2-135m", batch_size=8, max_model_len=512), seed=0)
    try:
        check_seeded(b)
        info = b.info()
        assert info.backend == "vllm" and info.extra["dtype"] == "float32"
        lengthy = list(b.generate([GenRequest("l", PROMPT, 9)], GenParams(max_tokens=5)))[0]
        assert lengthy.finish_reason == "length" and lengthy.output_tokens == 5
        check_json_schema(b)
    finally:
        b.close()


SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "enum": ["Ana", "Tom"]},
                         "words": {"type": "array", "items": {"enum": ["she", "him"]}, "maxItems": 3}},
          "required": ["name", "words"], "additionalProperties": False}


def check_json_schema(b):
    """A request with a JSON Schema comes back as JSON that follows it (structured outputs), even
    from a 135M model."""
    import jsonschema

    prompt = "Who is in 'Ana met Tom. She smiled at him.'? Answer in JSON."
    req = GenRequest("j", prompt, 3, json_schema=json.dumps(SCHEMA))
    reply = list(b.generate([req], GenParams(temperature=0, max_tokens=48)))[0]
    jsonschema.validate(json.loads(reply.text), SCHEMA)


def test_vllm_backend_passes_every_sampling_parameter_and_each_requests_seed():
    """Each request's SamplingParams carry the run's temperature, top_p, top_k, max_tokens and stop strings, the
    request's own seed and its JSON Schema as structured outputs (no engine is started: vLLM is only imported)."""
    pytest.importorskip("vllm")
    from harness.generation.vllm_backend import VLLMBackend

    b = VLLMBackend.__new__(VLLMBackend)
    params = GenParams(temperature=0.7, top_p=0.9, top_k=40, max_tokens=33, stop=("\n\n", "THE END"))
    sp = b._sampling(GenRequest("a", "hi", 7, json_schema=json.dumps(SCHEMA)), params)
    assert (sp.n, sp.temperature, sp.top_p, sp.top_k, sp.max_tokens, sp.stop, sp.seed) == (
        1, 0.7, 0.9, 40, 33, ["\n\n", "THE END"], 7)
    assert json.loads(sp.structured_outputs.json) == SCHEMA
    free = b._sampling(GenRequest("b", "hi", 8), GenParams(top_k=0, max_tokens=5))
    assert (free.top_k, free.stop, free.seed, free.max_tokens, free.structured_outputs) == (-1, [], 8, 5, None)


def test_vllm_backend_renders_each_prompt_and_yields_every_chunk():
    """Prompts go to the engine a chunk at a time, rendered with the chat template and the request's system message
    (the homogeneity suite's "You are a chatbot"); every request of every chunk comes back under its own id, with its
    own seed's reply, its token counts and "length" where max_tokens cut it; an aborted request is an error. The
    engine here is a stand-in that echoes what it was given; vLLM's own runs in test_vllm_offline_engine_on_cpu."""
    pytest.importorskip("vllm")
    from types import SimpleNamespace

    from harness.generation.vllm_backend import VLLMBackend

    class Tok:
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert not tokenize and add_generation_prompt
            return json.dumps(messages)

    calls = []

    class Engine:
        def generate(self, prompts, sampling, use_tqdm):
            calls.append([json.loads(p) for p in prompts])
            return [SimpleNamespace(prompt_token_ids=[0] * len(p), outputs=[SimpleNamespace(
                text=f"story {s.seed}", token_ids=[1] * s.seed, finish_reason="length" if s.seed % 2 else "stop")])
                for p, s in zip(prompts, sampling)]

    b = VLLMBackend.__new__(VLLMBackend)
    b.llm, b.tokenizer, b.chat_template, b.chunk = Engine(), Tok(), True, 2
    reqs = [GenRequest(f"r{i}", f"p{i}", i + 1, system="You are a chatbot" if i == 4 else None) for i in range(5)]
    out = list(b.generate(reqs, SAMPLED))
    assert [len(c) for c in calls] == [2, 2, 1]
    assert calls[0][1] == [{"role": "user", "content": "p1"}]
    assert calls[2][0] == [{"role": "system", "content": "You are a chatbot"}, {"role": "user", "content": "p4"}]
    assert [(r.request_id, r.text, r.finish_reason, r.output_tokens) for r in out] == [
        (f"r{i}", f"story {i + 1}", "length" if (i + 1) % 2 else "stop", i + 1) for i in range(5)]
    assert [r.prompt_tokens for r in out] == [len(json.dumps(m)) for c in calls for m in c]
    # a request the engine aborted is a failed request (kept with its reason, generated again by a rerun), not a
    # finished story: it was recorded as "stop" with the part written so far
    Engine.generate = lambda self, prompts, sampling, use_tqdm: [SimpleNamespace(prompt_token_ids=[0, 0], outputs=[
        SimpleNamespace(text="Once upon", token_ids=[1, 1], finish_reason="abort")])]
    aborted = list(b.generate(reqs[:1], SAMPLED))
    assert [(r.text, r.finish_reason, r.error) for r in aborted] == [
        ("", "error", "vLLM ended the request with finish reason 'abort'")]


@pytest.fixture(scope="module")
def vllm_server(smollm2_dir, tmp_path_factory):
    """`vllm serve` on loopback with the embedded model (a real OpenAI-compatible server). Its log
    goes to the test's temporary folder, not beside the model in the user's cache."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(smollm2_dir),
           "--served-model-name", "smollm2", "--dtype", "float32", "--max-model-len", "512",
           "--enforce-eager", "--host", "127.0.0.1", "--port", str(port), "--max-num-seqs", "8"]
    log = open(tmp_path_factory.mktemp("vllm-serve") / f"vllm-serve-{port}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 300
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited early; see {log.name}")
            try:
                if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                pytest.fail(f"vllm serve did not come up in 300 s; see {log.name}")
            time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.slow
def test_openai_backend_against_vllm_serve(vllm_server):
    b = load_backend(ModelConfig(backend="openai", path="smollm2", base_url=vllm_server, concurrency=4))
    try:
        check_seeded(b)
        assert b.retries == 0
    finally:
        b.close()
    raw = OpenAIBackend("smollm2", base_url=vllm_server, chat_template=False)
    try:
        r = list(raw.generate([GenRequest("c", PROMPT, 1)], GenParams(max_tokens=8)))[0]
        assert r.text and r.output_tokens == 8 and r.finish_reason == "length"
    finally:
        raw.close()
    chat = OpenAIBackend("smollm2", base_url=vllm_server)
    try:
        check_json_schema(chat)  # sent as OpenAI's response_format, which the server enforces
    finally:
        chat.close()


def test_openai_backend_sends_a_json_schema_as_response_format():
    b = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1")
    try:
        body = b._body(GenRequest("a", "hi", 1, json_schema=json.dumps(SCHEMA)), GenParams())
        assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA}}
        assert "response_format" not in b._body(GenRequest("a", "hi", 1), GenParams())
    finally:
        b.close()


def test_openai_backend_sends_every_sampling_parameter_and_a_bare_prompt_without_a_template():
    """The run's sampling parameters reach the server as set (top_k only where it cuts, the stop strings as a list)
    with the request's seed: to /chat/completions with the chat turns, or without a chat template to /completions
    with the prompt and its newline, as the local backends render it. A reply cut at max_tokens is kept as "length"
    (the LLM labeller asks again with twice the tokens), from either endpoint."""
    sent = []

    def handler(request):
        sent.append((request.url.path, json.loads(request.content)))
        choice = {"message": {"content": "A story."}} if "messages" in sent[-1][1] else {"text": "A story"}
        return httpx.Response(200, json={"choices": [{**choice, "finish_reason": "length"}],
                                         "usage": {"prompt_tokens": 4, "completion_tokens": 33}})

    params = GenParams(temperature=0.7, top_p=0.9, top_k=40, max_tokens=33, stop=("\n\n", "THE END"))
    out = []
    for chat in (True, False):
        b = OpenAIBackend("m", base_url="http://server/v1/", chat_template=chat)
        b.client.close()
        b.client = httpx.Client(transport=httpx.MockTransport(handler))
        try:
            out += b.generate([GenRequest("a", "hi", 7, system="You are a chatbot")], params)
            out += b.generate([GenRequest("k0", "hi", 8)], GenParams(top_k=0))
        finally:
            b.close()
    common = {"model": "m", "temperature": 0.7, "top_p": 0.9, "top_k": 40, "max_tokens": 33, "seed": 7, "n": 1,
              "stop": ["\n\n", "THE END"]}
    assert sent[0] == ("/v1/chat/completions", {**common, "messages": [
        {"role": "system", "content": "You are a chatbot"}, {"role": "user", "content": "hi"}]})
    assert sent[2] == ("/v1/completions", {**common, "prompt": "hi\n"})
    for _, body in (sent[1], sent[3]):  # top_k 0 (no cut) and no stop strings: neither is sent
        assert "top_k" not in body and "stop" not in body and (body["seed"], body["max_tokens"]) == (8, 200)
    assert [(r.text, r.finish_reason, r.prompt_tokens, r.output_tokens) for r in out[::2]] == [
        ("A story.", "length", 4, 33), ("A story", "length", 4, 33)]


def test_openai_backend_retries_429_and_5xx_and_records_failures(json_server):
    """A server that answers 429, then 503, then a valid completion; 400 for 'bad'."""
    calls: list[str] = []

    def answer(body):
        prompt = body["messages"][0]["content"]
        calls.append(prompt)
        if prompt == "bad":
            return 400, {"error": "bad request"}
        return {1: (429, {"error": "slow down"}, {"Retry-After": "0"}), 2: (503, {"error": "busy"})}.get(
            calls.count(prompt),
            (200, {"choices": [{"message": {"content": f"ok {body['seed']}"}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 2}}))

    b = OpenAIBackend("m", base_url=json_server(answer), concurrency=2, backoff_s=0.01, max_retries=3)
    try:
        out = {r.request_id: r for r in b.generate([GenRequest("a", "hello", 7), GenRequest("b", "bad", 1)], GenParams())}
    finally:
        b.close()
    assert out["a"].text == "ok 7" and out["a"].finish_reason == "stop" and out["a"].output_tokens == 2
    assert calls.count("hello") == 3  # 429, 503, 200
    assert out["b"].finish_reason == "error" and "HTTP 400" in out["b"].error
    assert calls.count("bad") == 1  # a 4xx other than 429 is not retried
    assert "system_message" not in out["b"].error  # (the hint is for a server refusing a system turn)
    assert b.retries == 2


def test_openai_backend_keeps_a_reply_of_the_wrong_shape_as_the_requests_error(json_server):
    """Valid JSON in the wrong shape (a list, a null message, a number as the text, null token counts) raised a
    TypeError or AttributeError that stopped the run with a traceback, the stories in flight lost."""
    replies = {"list": [], "nullmsg": {"choices": [{"message": None}]}, "number": {"choices": [{"message": {"content": 42}}]},
               "nochoice": {"choices": []}}

    def answer(body):
        prompt = body["messages"][-1]["content"]
        if prompt == "nullusage":  # a good story, its token counts left null: kept, counted as 0
            return 200, {"choices": [{"message": {"content": "A story."}}], "usage": {"prompt_tokens": None}}
        if prompt == "filtered":  # the server's content filter: kept as such, not as a story the model ended
            return 200, {"choices": [{"message": {"content": None}, "finish_reason": "content_filter"}]}
        return 200, replies[prompt]

    b = OpenAIBackend("m", base_url=json_server(answer), max_retries=2, backoff_s=0.01)
    try:
        out = {r.request_id: r for r in b.generate([GenRequest(k, k, 1) for k in [*replies, "nullusage", "filtered"]],
                                                   GenParams())}
    finally:
        b.close()
    for k, says in (("list", "no list of choices"), ("nullmsg", "choices[0].message has no content"),
                    ("number", "the text is a int, not a string"), ("nochoice", "no list of choices")):
        assert out[k].finish_reason == "error" and out[k].error == f"malformed response: {says}", out[k]
    assert (out["nullusage"].text, out["nullusage"].finish_reason, out["nullusage"].prompt_tokens) == ("A story.", "stop", 0)
    assert (out["filtered"].text, out["filtered"].finish_reason) == ("", "content_filter")
    assert b.retries == 0  # a malformed reply is not asked again


def test_openai_backend_stopped_early_sends_no_more_requests(json_server):
    """Ctrl-C (or a failed write) while the stories come: every queued request was still sent, and its story thrown
    away, before the command could exit."""
    sent = []

    def answer(body):
        sent.append(body["messages"][-1]["content"])
        time.sleep(0.05)
        return 200, {"choices": [{"message": {"content": "A story."}}]}

    b = OpenAIBackend("m", base_url=json_server(answer), concurrency=1)
    try:
        stories = b.generate([GenRequest(str(i), str(i), 1) for i in range(40)], GenParams())
        next(stories)
        stories.close()  # as a KeyboardInterrupt in the consumer closes the generator
        time.sleep(0.3)
    finally:
        b.close()
    assert len(sent) <= 3, sent


class StallingHandler(BaseHTTPRequestHandler):
    """Accepts a request, reads it, then says nothing until ``release`` is set (or 10 s)."""

    calls: list[float] = []
    release = threading.Event()

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["content-length"]))
        StallingHandler.calls.append(time.monotonic())
        StallingHandler.release.wait(10)  # far longer than the backend's timeout
        try:
            self.send_response(504)
            self.end_headers()
        except OSError:
            pass  # the client hung up long ago

    def log_message(self, *args):
        pass


@pytest.fixture
def stalling_server():
    """The base URL of a server that accepts every request and answers none (until the test ends)."""
    StallingHandler.calls.clear()
    StallingHandler.release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), StallingHandler)
    server.daemon_threads = True
    server.block_on_close = False
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        StallingHandler.release.set()
        server.shutdown()
        server.server_close()


def test_openai_backend_times_out_and_gives_up(stalling_server):
    """A server that accepts and never answers: each attempt times out, the backend retries
    ``max_retries`` times, then records the failure, within a bounded time."""
    b = OpenAIBackend("m", base_url=stalling_server, max_retries=2, backoff_s=0.01, max_backoff_s=0.05, timeout_s=0.4)
    t0 = time.monotonic()
    try:
        r = list(b.generate([GenRequest("a", "x", 1)], GenParams()))[0]
        elapsed = time.monotonic() - t0
    finally:
        b.close()
    assert r.request_id == "a" and r.finish_reason == "error" and r.text == ""
    assert "ReadTimeout" in r.error, r.error  # a timeout, not a refused connection
    assert len(StallingHandler.calls) == 3 and b.retries == 2  # the first try and two retries
    assert 3 * 0.4 <= elapsed < 3.5, elapsed  # each attempt waited its timeout, and no longer


def test_openai_backend_stopped_by_ctrl_c_cuts_the_requests_in_flight_and_retries_none(stalling_server):
    """Ctrl-C while a hung server held requests: the interpreter joins the pool's threads at exit, and each went
    on through its retries (timeout x retries: twelve minutes at the defaults) before the command could end."""
    import os
    import signal

    b = OpenAIBackend("m", base_url=stalling_server, concurrency=2, max_retries=3, backoff_s=0.01, max_backoff_s=0.01,
                      timeout_s=1.0)
    # a runner started in the background (`make test &`) inherits SIGINT ignored, and the Ctrl-C below never came
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        stories = b.generate([GenRequest(str(i), "x", 1) for i in range(2)], GenParams())
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # Ctrl-C while next() waits
        with pytest.raises(KeyboardInterrupt):
            next(stories)
        assert b.client.is_closed
        mine = [t for t in threading.enumerate() if t.name.startswith("harness-openai")]
        assert mine and all(t.daemon for t in mine)  # not joined at exit: their reads may wait out the timeout
        time.sleep(1.6)  # past the timeout: a request still in flight would have been sent again
        assert len(StallingHandler.calls) == 2, StallingHandler.calls
    finally:
        signal.signal(signal.SIGINT, before)
        b.close()


def test_seeded_sampler_draws_from_the_filtered_distribution():
    """The per-request sampler of the transformers backend against the exact distribution:
    chi-square goodness of fit after temperature, top-k and top-p, and zero mass outside."""
    import torch
    from scipy.stats import chisquare

    from harness.generation.hf import SeededSampler

    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05, 0.0]]))
    cases = [
        (GenParams(temperature=1.0), [0.5, 0.2, 0.15, 0.1, 0.05, 0.0]),
        (GenParams(temperature=1.0, top_k=3), [0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85, 0, 0, 0]),
        (GenParams(temperature=1.0, top_p=0.6), [0.5 / 0.7, 0.2 / 0.7, 0, 0, 0, 0]),
        # temperature 0.5 squares the probabilities; top-p then cuts the sharpened distribution (vLLM's order: cut
        # first, 0.15 would have stayed)
        (GenParams(temperature=0.5), [0.25 / 0.325, 0.04 / 0.325, 0.0225 / 0.325, 0.01 / 0.325, 0.0025 / 0.325, 0]),
        (GenParams(temperature=0.5, top_p=0.8), [0.25 / 0.29, 0.04 / 0.29, 0, 0, 0, 0]),
    ]
    for params, expected in cases:
        counts = torch.zeros(6)
        for seed in range(4000):
            out = SeededSampler([seed], params)(torch.zeros(1, 1, dtype=torch.long), logits.clone())
            counts[int(out.argmax())] += 1
        exp = torch.tensor(expected) * 4000
        keep = exp > 0
        assert counts[~keep].sum() == 0, (params, counts)
        assert chisquare(counts[keep].numpy(), exp[keep].numpy()).pvalue > 1e-3, (params, counts)
    # A row's draw depends on its seed only, not on its neighbours in the batch.
    row = torch.randn(1, 50, generator=torch.Generator().manual_seed(0))
    batch = torch.cat([row, torch.randn(2, 50), row])
    a = SeededSampler([7, 8, 9, 7], GenParams())(torch.zeros(4, 1, dtype=torch.long), batch)
    b = SeededSampler([7], GenParams())(torch.zeros(1, 1, dtype=torch.long), row.clone())
    assert (a == 0).sum() == 4 and a[0].argmax() == a[3].argmax() == b[0].argmax()


def test_seeded_sampler_never_draws_a_filtered_token_even_for_a_uniform_of_zero(monkeypatch):
    """A token top-k (or top-p) removed has zero mass, a flat step of the CDF: the draw for u == 0 (one in 2**24
    float32 uniforms, so a few times in a large corpus) takes the first token with mass, never the removed one."""
    import torch

    from harness.generation.hf import SeededSampler

    logits = torch.log(torch.tensor([[0.1, 0.5, 0.4]]))
    monkeypatch.setattr(torch, "rand", lambda *size, generator=None, **kw: torch.zeros(*size))
    for params in (GenParams(top_k=2), GenParams(top_p=0.5)):
        out = SeededSampler([0], params)(torch.zeros(1, 1, dtype=torch.long), logits.clone())
        assert int(out.argmax()) == 1 and (out == 0).sum() == 1, params


def test_a_system_message_goes_where_the_config_puts_it():
    """Gemma 2's chat template has no system role: every homogeneity prompt ("You are a chatbot") raised
    'System role not supported' in it. model.system_message puts the message in the user turn (or drops it), and a
    template that refuses it says so in one line with that way out."""
    from jinja2.exceptions import TemplateError

    from harness.errors import BackendError
    from harness.generation.chat import render_prompt
    from harness.pipeline import WorkItem, gen_request
    from harness.suites.base import Prompt

    def prompt(pid, meta):
        return Prompt(pid, "homogeneity", "Write a story.", "d", "neutral", "s", (), meta=meta)

    item = WorkItem(prompt("p", {"system": "You are a chatbot"}), 0, 5)
    assert gen_request(item) == GenRequest("p#0", "Write a story.", 5, "You are a chatbot")
    assert gen_request(item, "in_user_turn") == GenRequest("p#0", "You are a chatbot\n\nWrite a story.", 5, None)
    assert gen_request(item, "drop") == GenRequest("p#0", "Write a story.", 5, None)
    bare = WorkItem(prompt("q", {}), 1, 6)
    assert gen_request(bare, "in_user_turn") == GenRequest("q#1", "Write a story.", 6, None)

    class NoSystemRole:
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            if messages[0]["role"] == "system":
                raise TemplateError("System role not supported")
            return messages[0]["content"]

    with pytest.raises(BackendError, match=r"refused the prompt's system message \(System role not supported\); set "
                                           r"model.system_message: in_user_turn"):
        render_prompt(NoSystemRole(), "hi", True, "You are a chatbot")
    assert render_prompt(NoSystemRole(), "You are a chatbot\n\nhi", True) == "You are a chatbot\n\nhi"


def test_system_message_reaches_chat_templates_and_openai_bodies():
    from harness.generation.chat import render_prompt

    class Tok:
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return json.dumps(messages)

    assert json.loads(render_prompt(Tok(), "hi", True, "You are a chatbot")) == [
        {"role": "system", "content": "You are a chatbot"}, {"role": "user", "content": "hi"}]
    assert json.loads(render_prompt(Tok(), "hi", True)) == [{"role": "user", "content": "hi"}]
    assert render_prompt(Tok(), "hi", False, "You are a chatbot") == "hi\n"  # no template: no system turn
    b = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1")
    try:
        body = b._body(GenRequest("a", "hi", 3, system="You are a chatbot"), GenParams())
    finally:
        b.close()
    assert body["messages"][0] == {"role": "system", "content": "You are a chatbot"}



def _char_model(seed: int = 0):
    """A one-layer Llama with random weights over a character vocabulary with no whitespace, and
    its tokenizer: whatever it writes under a schema has a bounded length."""
    import string

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "</s>": 1, **{c: i + 2 for i, c in enumerate('{}[]":,' + string.ascii_letters)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="</s>", pad_token="</s>")
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=1, eos_token_id=1, pad_token_id=1)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg), tok


def _follows(text: str, schema: dict) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def test_transformers_backend_holds_replies_to_their_json_schema(tmp_path):
    """xgrammar's mask in the transformers backend: a random model's every reply, greedy or sampled,
    parses and follows its schema and ends by itself; a request without a schema in the same batch
    writes what it writes alone; a schema that cannot compile fails its batch with one line."""
    import jsonschema

    from harness.errors import BackendError
    from harness.generation.hf import TransformersBackend
    from harness.generation.json_constraint import SchemaGrammars
    from harness.models import ResolvedModel

    model, tok = _char_model()
    b = TransformersBackend.from_loaded(model, tok, ResolvedModel("char", tmp_path), chat_template=False,
                                        batch_size=8, max_model_len=256)
    schema = json.dumps(SCHEMA)
    free = GenRequest("free", "AnametTomatthedoor", 5)  # the longest prompt: the others are left-padded
    for params in (GenParams(temperature=0, max_tokens=80), GenParams(temperature=1.0, max_tokens=80)):
        reqs = [GenRequest(f"j{s}", "Ana" + "met" * s + "Tom", s, json_schema=schema) for s in range(6)] + [free]
        out = {r.request_id: r for r in b.generate(reqs, params)}
        for s in range(6):
            r = out[f"j{s}"]
            assert r.finish_reason == "stop", r
            jsonschema.validate(json.loads(r.text), SCHEMA)
        if not params.greedy:  # six seeds, not one reply six times
            assert len({out[f"j{s}"].text for s in range(6)}) > 1
        alone = list(b.generate([free], params))[0]
        assert out["free"].text == alone.text
        # Without the mask the same requests write no valid reply: the mask did the work.
        loose = b.generate([GenRequest(r.request_id, r.prompt, r.seed) for r in reqs[:6]], params)
        assert not any(_follows(r.text, SCHEMA) for r in loose)
    with pytest.raises(BackendError, match="request bad: json_schema could not be compiled"):
        list(b.generate([GenRequest("bad", "Ana", 0, json_schema="{not json")], GenParams(temperature=0)))
    with pytest.raises(BackendError, match="no end-of-sequence token"):
        SchemaGrammars(tok, len(tok), [])


def test_schema_mask_of_the_pure_torch_kernel_matches_the_cpu_kernel(tmp_path):
    """The mask is applied by xgrammar's pure-torch kernel (no Triton or CUDA compiler needed beside
    a GPU). It masks exactly what xgrammar's C++ CPU kernel masks, step after step, with a row left
    out by indices, and leaves a row without a schema untouched."""
    import torch

    from harness.generation.hf import TransformersBackend
    from harness.models import ResolvedModel

    model, tok = _char_model()
    b = TransformersBackend.from_loaded(model, tok, ResolvedModel("char", tmp_path), chat_template=False)
    schemas = [json.dumps(SCHEMA), None, json.dumps(SCHEMA)]
    procs = [b._schema_grammars().processor(schemas, kernel=k) for k in ("cpu", None)]
    ids = torch.zeros(3, 1, dtype=torch.long)
    for step, text in enumerate('{"name":"Ana"'):
        scores = torch.randn(3, len(tok), generator=torch.Generator().manual_seed(step))
        a, c = (p(ids, scores.clone()) for p in procs)
        assert torch.equal(a, c) and torch.equal(a[1], scores[1])
        allowed = torch.isfinite(a[0]).nonzero().flatten().tolist()
        assert tok.convert_tokens_to_ids(text) in allowed and len(allowed) < len(tok) / 2
        ids = torch.cat([ids, torch.full((3, 1), tok.convert_tokens_to_ids(text))], dim=1)


def test_schema_mask_forbids_the_padding_columns_of_a_wider_output_layer(tmp_path):
    """An output layer padded past the tokenizer's vocabulary (as many models' are, to a multiple of 64)
    gives logits the grammar knows nothing of: a row under a schema can never draw them, a row without
    one keeps them."""
    import torch

    from harness.generation.hf import TransformersBackend
    from harness.models import ResolvedModel

    model, tok = _char_model()
    b = TransformersBackend.from_loaded(model, tok, ResolvedModel("char", tmp_path), chat_template=False)
    proc = b._schema_grammars().processor([json.dumps(SCHEMA), None])
    scores = torch.randn(2, len(tok) + 8, generator=torch.Generator().manual_seed(0))
    scores[:, len(tok):] = 100.0  # the padding would win every draw
    out = proc(torch.zeros(2, 1, dtype=torch.long), scores.clone())
    assert torch.isneginf(out[0, len(tok):]).all() and torch.isfinite(out[0, :len(tok)]).any()
    assert torch.equal(out[1], scores[1])


def test_a_batchs_schemas_compile_on_threads_as_they_compile_one_by_one(tmp_path, monkeypatch):
    """A batch's distinct schemas compile on ``COMPILE_THREADS`` threads, each once, each row getting
    its own schema's grammar (the masks equal those of one-by-one compiles); of two schemas that cannot
    compile, the error names the batch's first."""
    import torch

    import harness.generation.json_constraint as jc
    from harness.errors import BackendError
    from harness.generation.hf import TransformersBackend
    from harness.models import ResolvedModel

    model, tok = _char_model()
    grammars = TransformersBackend.from_loaded(model, tok, ResolvedModel("char", tmp_path))._schema_grammars()
    schemas = [json.dumps({**SCHEMA, "properties": {**SCHEMA["properties"], "name": {"enum": [n]}}})
               for n in ("Ana", "Tom", "Zed", "Bo")]
    rows = [schemas[0], schemas[1], None, schemas[0], schemas[2], schemas[3], schemas[1]]
    ids = [f"r{i}" for i in range(len(rows))]
    compiled = []
    real = grammars.compile
    monkeypatch.setattr(grammars, "compile", lambda s, where: compiled.append(where) or real(s, where))
    procs = {}
    for threads in (1, 4):
        monkeypatch.setattr(jc, "COMPILE_THREADS", threads)
        compiled.clear()
        procs[threads] = grammars.processor(rows, ids=ids)
        assert sorted(compiled) == [f"request {r}: json_schema" for r in ("r0", "r1", "r4", "r5")]
    prompt = torch.zeros(len(rows), 1, dtype=torch.long)
    for text in '{"name":"':
        scores = torch.randn(len(rows), len(tok))
        one, pooled = (procs[t](prompt, scores.clone()) for t in (1, 4))
        assert torch.equal(one, pooled)
        prompt = torch.cat([prompt, torch.full((len(rows), 1), tok.convert_tokens_to_ids(text))], dim=1)
    scores = procs[4](prompt, torch.zeros(len(rows), len(tok)))  # each row may start only its own name
    assert [tok.convert_ids_to_tokens(torch.isfinite(r).nonzero().flatten().tolist()) for r in scores[[0, 1, 4, 5]]] \
        == [["A"], ["T"], ["Z"], ["B"]]
    with pytest.raises(BackendError, match="request b1: json_schema could not be compiled"):
        grammars.processor([schemas[0], "{not json", schemas[1], "[also not"], ids=["g0", "b1", "g2", "b3"])


def test_schema_compiler_keeps_a_bounded_cache(tmp_path, monkeypatch):
    """The labeller sends a new schema with every story; the compiled grammars xgrammar keeps stay
    under ``CACHE_BYTES`` however many it has compiled (unbounded, 1,000 dev stories' schemas kept
    about 200 MiB with SmolLM2's tokenizer)."""
    import harness.generation.json_constraint as jc
    from harness.generation.hf import TransformersBackend
    from harness.models import ResolvedModel

    monkeypatch.setattr(jc, "CACHE_BYTES", 256 << 10)
    model, tok = _char_model()
    grammars = TransformersBackend.from_loaded(model, tok, ResolvedModel("char", tmp_path))._schema_grammars()
    sizes = []
    for i in range(300):
        schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "name": {"enum": ["Ana", "Tom", f"Zed{i}"]}}}
        grammars.compile(json.dumps(schema))
        sizes.append(grammars._compiler.get_cache_size_bytes())
    assert max(sizes) <= 256 << 10 and sizes[-1] > 0
    assert sizes[100] > sizes[10]  # it does keep grammars, up to the bound


def test_a_reply_has_the_room_its_own_prompt_leaves_whatever_its_batchmates(tmp_path):
    """The room for new tokens is max_model_len less the prompt: in a batch it was the longest prompt's, so a
    long batchmate cut a short prompt's reply (an LLM labeller's labels then depended on its batchmates). A
    prompt too long for max_tokens is generated alone, with its own room; the others keep theirs."""
    from harness.generation.hf import TransformersBackend
    from harness.models import ResolvedModel

    model, tok = _char_model()
    b = TransformersBackend.from_loaded(model, tok, ResolvedModel("char", tmp_path), chat_template=False,
                                        batch_size=8, max_model_len=60)
    model.generation_config.eos_token_id = None  # a random model that never stops: every reply fills its room
    b._eos_ids = lambda: set()
    params = GenParams(temperature=0, max_tokens=30)
    short, long = GenRequest("short", "AnametTom", 0), GenRequest("long", "Ana" + "met" * 15 + "Tom", 0)
    alone = {r.request_id: r for req in (short, long) for r in b.generate([req], params)}
    together = {r.request_id: r for r in b.generate([short, long], params)}
    assert alone["short"].output_tokens == 30 and alone["long"].output_tokens == 60 - alone["long"].prompt_tokens < 30
    assert {k: (r.text, r.output_tokens, r.finish_reason) for k, r in together.items()} == {
        k: (r.text, r.output_tokens, r.finish_reason) for k, r in alone.items()}
    # a reply that filled its room was cut, not ended: "length" (the LLM labeller asks again with twice the tokens)
    assert {r.finish_reason for r in (*alone.values(), *together.values())} == {"length"}


def test_a_reply_ends_before_the_first_stop_string_of_any(tmp_path):
    """Stop strings end a reply and are not part of it: the text is cut before the earliest of them (whichever comes
    first in the text, not in the list; one at the very start leaves nothing), and the reply counts as stopped, not
    cut at max_tokens. One stop string given as a string is that string, not its characters. Generation ends there
    and the reply's output tokens end with the stop string's last one, in a batch too."""
    from harness.generation.chat import cut_at_stop
    from harness.generation.hf import TransformersBackend
    from harness.models import ResolvedModel

    assert cut_at_stop("Once upon THE END a time\n\nmore", ("\n\n", "THE END")) == ("Once upon ", True)
    assert cut_at_stop("THE END of it", ("it", "THE END")) == ("", True)
    assert cut_at_stop("no end", ("THE END",)) == cut_at_stop("no end", ()) == ("no end", False)
    assert GenParams(stop="THE END").stop == ("THE END",)
    model, tok = _char_model()
    b = TransformersBackend.from_loaded(model, tok, ResolvedModel("char", tmp_path), chat_template=False)
    b._eos_ids = lambda: set()  # a random model that never stops: every reply runs to max_tokens
    req = GenRequest("s", "AnametTom", 0)
    full = list(b.generate([req], GenParams(temperature=0, max_tokens=30)))[0]
    assert full.finish_reason == "length" and len(full.text) == 30
    stops = (full.text[20:22], full.text[12:14])
    first = min(full.text.find(s) for s in stops)
    cut = list(b.generate([req], GenParams(temperature=0, max_tokens=30, stop=stops)))[0]
    assert (cut.text, cut.finish_reason) == (full.text[:first], "stop")
    # generation ends at the stop string (it ran on to max_tokens, and all 30 tokens were counted as output); in a
    # batch, the row that stopped counts its own tokens (one per character here), not the padding after them
    assert cut.output_tokens == first + 2
    forward, calls = model.forward, []
    model.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    assert list(b.generate([req], GenParams(temperature=0, max_tokens=30, stop=stops)))[0] == cut
    model.forward = forward
    assert len(calls) == first + 2  # one step per token up to the stop string's end, none after it
    other = GenRequest("o", "ZedZedZed", 0)  # as long as req's prompt: no padding before either
    alone = list(b.generate([other], GenParams(temperature=0, max_tokens=30)))[0]
    assert stops[0] not in alone.text and stops[1] not in alone.text
    both = list(b.generate([req, other], GenParams(temperature=0, max_tokens=30, stop=stops)))
    assert [(g.text, g.finish_reason, g.output_tokens) for g in both] == [
        (cut.text, "stop", first + 2), (alone.text, "length", 30)]


def test_transformers_backend_renders_the_system_message_and_the_generation_prompt(tmp_path):
    """With a chat template, the model sees the request's system message before its prompt and the template's
    generation prompt after it (the assistant's turn, which the model then writes); each batch of batch_size comes
    back. The character model's template writes the turns' texts one after another, then "Zed" for the turn."""
    from harness.generation.hf import TransformersBackend
    from harness.models import ResolvedModel

    model, tok = _char_model()
    tok.chat_template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}Zed{% endif %}")
    b = TransformersBackend.from_loaded(model, tok, ResolvedModel("char", tmp_path), batch_size=1)
    reqs = [GenRequest("system", "Tom", 0, system="Ana"), GenRequest("inline", "AnaTom", 0)]
    out = {r.request_id: r for r in b.generate(reqs, GenParams(temperature=0, max_tokens=12))}
    assert out["system"].prompt_tokens == out["inline"].prompt_tokens == len("AnaTomZed")
    assert out["system"].text == out["inline"].text


def test_a_device_torch_cannot_see_is_one_line_naming_the_setting(monkeypatch):
    import torch

    from harness.errors import ConfigError
    from harness.models import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto", "model.device") == "cpu" and resolve_device(None, "x") == "cpu"
    assert resolve_device("cpu", "model.device") == "cpu"
    with pytest.raises(ConfigError, match=r"^embedding.device: cuda but torch sees no GPU here; use auto or cpu$"):
        resolve_device("cuda", "embedding.device")
    with pytest.raises(ConfigError, match=r"^model.device: must be auto, cpu, cuda or cuda:N, got 'gpu'$"):
        resolve_device("gpu", "model.device")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto", "x") == "cuda" and resolve_device("cuda:1", "x") == "cuda:1"
    with pytest.raises(ConfigError, match=r"^model.device: cuda:2 but torch sees 2 GPU\(s\) here"):
        resolve_device("cuda:2", "model.device")
    # the transformers backend asks before it loads anything
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="model.device: cuda but torch sees no GPU"):
        load_backend(ModelConfig(backend="transformers", path="smollm2-135m", device="cuda"))


def test_openai_backend_keeps_a_reply_that_does_not_decode_as_its_requests_error(json_server):
    """A 200 whose gzip body did not decode raised httpx.DecodingError out of the backend: the run stopped (a
    traceback), and the LLM labeller's later requests all failed on the closed client."""
    def answer(body):
        if body["messages"][-1]["content"] == "bad":
            return 200, b"not gzip", {"Content-Encoding": "gzip"}
        return 200, {"choices": [{"message": {"content": "A story."}}]}

    b = OpenAIBackend("m", base_url=json_server(answer), max_retries=1, backoff_s=0.001)
    try:
        out = {r.request_id: r for r in b.generate([GenRequest(p, p, 1) for p in ("bad", "ok")], GenParams())}
        assert out["bad"].finish_reason == "error" and "DecodingError" in out["bad"].error
        assert out["ok"].text == "A story."
        again = list(b.generate([GenRequest("later", "ok", 1)], GenParams()))
        assert again[0].text == "A story."  # the backend is still usable
    finally:
        b.close()


def test_openai_backend_names_the_way_out_when_the_server_refuses_a_system_turn(json_server):
    def answer(body):
        if body["messages"][0]["role"] == "system":
            return 400, {"error": "System role not supported"}
        return 200, {"choices": [{"message": {"content": "A story."}}]}

    b = OpenAIBackend("m", base_url=json_server(answer))
    try:
        (r,) = b.generate([GenRequest("a", "hi", 1, system="You are a chatbot")], GenParams())
    finally:
        b.close()
    assert r.finish_reason == "error" and r.error.endswith("set model.system_message: in_user_turn")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: a connection to it is refused


def test_openai_backend_calls_a_server_that_fails_every_request_down_and_sends_no_more():
    """A dead port failed every request after its retries, one after another: a corpus of 100,000 stories took
    days to fail. down_after requests in a row that failed so stop the backend with one line naming the server;
    the stories before are yielded, and a later call sends nothing."""
    from harness.errors import BackendError

    b = OpenAIBackend("m", base_url=f"http://127.0.0.1:{_closed_port()}/v1", concurrency=2, max_retries=1,
                      backoff_s=0.001, max_backoff_s=0.001)
    assert b.down_after == 8
    got = []
    try:
        with pytest.raises(BackendError, match=r"/v1: the server looks down: (8|9|10) requests in a row failed, each after "
                                               r"1 retries \(last: ConnectError"):
            for r in b.generate([GenRequest(str(i), "x", i) for i in range(60)], GenParams()):
                got.append(r)
        # the workers count a failure before its result is yielded: with 2 in flight, the 8th may still be queued
        assert b.down_after - (b.concurrency - 1) <= len(got) < 12 and all(r.finish_reason == "error" for r in got)
        with pytest.raises(BackendError, match="looks down"):
            next(iter(b.generate([GenRequest("again", "x", 1)], GenParams())))
    finally:
        b.close()


def test_openai_backend_called_down_still_yields_the_replies_it_holds(json_server):
    """Replies that came back before the server was called down, but that the caller had not taken yet, were
    dropped with the error: a rerun sent those stories again. They are yielded, then the error is raised."""
    import time

    from harness.errors import BackendError

    def answer(body):
        if body["messages"][-1]["content"] == "ok":
            return 200, {"choices": [{"message": {"content": "A story."}}]}
        return 503, {"error": "busy"}

    b = OpenAIBackend("m", base_url=json_server(answer), concurrency=1, max_retries=0, down_after=3)
    prompts = ["busy", "ok", "busy", "busy", "busy", "busy"]
    got = []
    try:
        with pytest.raises(BackendError, match="looks down"):
            for r in b.generate([GenRequest(str(i), p, 1) for i, p in enumerate(prompts)], GenParams()):
                got.append(r)
                for _ in range(500):  # the caller is slow: the worker answers the rest before it takes the next
                    if b._failing >= 4:
                        break
                    time.sleep(0.01)
    finally:
        b.close()
    # the reply in hand, not the failures queued after it (a rerun sends those again whatever they said)
    assert [r.request_id for r in got] == ["0", "1"] and got[1].text == "A story."


def test_openai_backend_is_not_called_down_by_requests_the_server_answered(json_server):
    """A 400 is the request's own fault, and one reply between failures shows the server up: neither stops it."""
    def answer(body):
        prompt = body["messages"][-1]["content"]
        if prompt.startswith("bad"):
            return 400, {"error": "too long"}
        if prompt.startswith("busy"):
            return 503, {"error": "busy"}
        return 200, {"choices": [{"message": {"content": "A story."}}]}

    b = OpenAIBackend("m", base_url=json_server(answer), concurrency=1, max_retries=0, down_after=3)
    prompts = ["bad"] * 10 + ["busy", "busy", "ok"] * 5
    try:
        out = list(b.generate([GenRequest(str(i), p, 1) for i, p in enumerate(prompts)], GenParams()))
    finally:
        b.close()
    assert len(out) == len(prompts) and sum(r.finish_reason == "error" for r in out) == 20
