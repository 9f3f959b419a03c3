#!/usr/bin/env python3
"""`nanovllm serve` over raw HTTP: every error code, malformed requests, the API key, the queue bound, a client
that leaves mid-stream, SIGTERM with streams in flight, 1,000 concurrent streams, and the load generator
(`nanovllm bench-serve`) against it.

Only Python's standard library (http.client, sockets, asyncio): raw sockets send exactly the bytes a test needs
(broken request lines, bodies cut short, a close in the middle of a stream) and asyncio holds 1,000 connections
in one thread; no client library sits between the test and the server.

    http_test.py NANOVLLM MODEL_DIR
"""
import asyncio
import http.client
import json
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import traceback

NANOVLLM, MODEL = sys.argv[1], sys.argv[2]
ENGINE = ["--device", "cpu", "--kvcache-block-size", "16", "--seed", "1"]


class Server:
    """A `nanovllm serve` process on a free loopback port."""

    def __init__(self, *extra):
        self.proc = subprocess.Popen(
            [NANOVLLM, "serve", "--model", MODEL, "--served-model-name", "demo", "--port", "0", *ENGINE, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        match = re.search(r"serving 'demo' on http://127\.0\.0\.1:(\d+) ", line)
        if not match:
            self.proc.kill()
            raise RuntimeError(f"no startup line: {line!r} {self.proc.stderr.read()!r}")
        self.port = int(match.group(1))

    def stop(self, sig=signal.SIGTERM, timeout=20):
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, resp.getheader("Content-Type"), data


def post(port, path, body, headers=None):
    status, _, data = request(port, "POST", path, body, headers)
    return status, json.loads(data) if data else None


def events(body):
    """The server-sent events of a response body: parsed chunks, then "[DONE]"."""
    out = []
    for block in body.decode().split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def stream(port, path, body, headers=None):
    status, ctype, data = request(port, "POST", path, dict(body, stream=True), headers)
    assert status == 200, (status, data)
    assert ctype == "text/event-stream", ctype
    evs = events(data)
    assert evs[-1] == "[DONE]" and "[DONE]" not in evs[:-1], evs[-3:]
    return evs[:-1]


def raw(port, data, read=True):
    """Sends bytes as they are; returns the status line's code (0 when the server closed without a reply)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        if not read:
            return None
        reply = b""
        while True:
            piece = s.recv(65536)
            if not piece:
                break
            reply += piece
            if b"\r\n\r\n" in reply and b"Content-Length" in reply:
                head, _, rest = reply.partition(b"\r\n\r\n")
                length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
                if len(rest) >= length:
                    break
        match = re.match(rb"HTTP/1\.1 (\d+)", reply)
        return (int(match.group(1)), reply) if match else (0, reply)


def metrics(port):
    status, ctype, data = request(port, "GET", "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    values = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def metric(values, name, **labels):
    label_text = ",".join([f'model_name="demo"'] + [f'{k}="{v}"' for k, v in labels.items()])
    return values[f"nanovllm:{name}{{{label_text}}}"]


COMPLETION = {"model": "demo", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
CHAT = {"model": "demo", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8, "temperature": 0}


def check_error(status, body, want_status, want_param=None, want_text=None):
    assert status == want_status, (status, body)
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["code"] == want_status, err
    if want_param is not None:
        assert err["param"] == want_param, err
    if want_text is not None:
        assert want_text in err["message"], err
    assert all(ord(c) >= 0x20 for c in err["message"]), err  # one line, no control characters


# ---- tests on the main server ----

def test_info_endpoints(port):
    assert request(port, "GET", "/health")[0] == 200
    status, _, data = request(port, "GET", "/version")
    assert status == 200 and re.match(r"\d+\.\d+", json.loads(data)["version"]), data
    status, _, data = request(port, "GET", "/v1/models")
    models = json.loads(data)
    assert status == 200 and models["object"] == "list", models
    assert [m["id"] for m in models["data"]] == ["demo"] and models["data"][0]["max_model_len"] == 1024, models


def test_completion_shape(port):
    status, body = post(port, "/v1/completions", COMPLETION)
    assert status == 200, body
    assert re.fullmatch(r"cmpl-[0-9a-f]{32}", body["id"]) and body["object"] == "text_completion", body
    assert abs(body["created"] - time.time()) < 60 and body["model"] == "demo", body
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] in ("stop", "length") and choice["logprobs"] is None
    usage = body["usage"]
    assert usage["completion_tokens"] == 8 and usage["total_tokens"] == usage["prompt_tokens"] + 8, usage


def test_streamed_equals_whole_completion(port):
    for extra in ({}, {"temperature": 1.0, "seed": 7}, {"stop": [" the"]}, {"logprobs": 2}, {"echo": True}):
        req = dict(COMPLETION, max_tokens=12, **extra)
        status, whole = post(port, "/v1/completions", req)
        assert status == 200, whole
        chunks = stream(port, "/v1/completions", req)
        assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
        text = "".join(c["choices"][0]["text"] for c in chunks)
        assert text == whole["choices"][0]["text"], (extra, text, whole)
        assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"], chunks[-1]
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
        if "logprobs" in extra:
            tokens = sum((c["choices"][0]["logprobs"]["tokens"] for c in chunks if c["choices"][0]["logprobs"]), [])
            assert tokens == whole["choices"][0]["logprobs"]["tokens"], (tokens, whole)
            assert len(tokens) == whole["usage"]["completion_tokens"]


def test_streamed_equals_whole_chat(port):
    status, whole = post(port, "/v1/chat/completions", CHAT)
    assert status == 200 and whole["object"] == "chat.completion", whole
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", whole["id"]), whole["id"]
    message = whole["choices"][0]["message"]
    assert message["role"] == "assistant", message
    chunks = stream(port, "/v1/chat/completions", dict(CHAT, stream_options={"include_usage": True}))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant", chunks[0]
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"] == whole["usage"], usage_chunk
    content = chunks[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in content)
    assert text == message["content"], (text, message)
    assert content[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"], content[-1]


def test_prompt_forms(port):
    status, ids = post(port, "/tokenize", {"prompt": "Hello world"})
    assert status == 200 and ids["count"] == len(ids["tokens"]) == 2, ids
    status, text = post(port, "/detokenize", {"tokens": ids["tokens"]})
    assert status == 200 and text["prompt"] == "Hello world", text
    base = {"model": "demo", "max_tokens": 3, "temperature": 0}
    _, by_text = post(port, "/v1/completions", dict(base, prompt="Hello world"))
    _, by_ids = post(port, "/v1/completions", dict(base, prompt=ids["tokens"]))
    assert by_text["choices"][0]["text"] == by_ids["choices"][0]["text"], (by_text, by_ids)
    status, both = post(port, "/v1/completions", dict(base, prompt=["Hello world", ids["tokens"]]))
    assert status == 200 and [c["index"] for c in both["choices"]] == [0, 1], both
    assert both["choices"][1]["text"] == by_text["choices"][0]["text"], both
    status, tok = post(port, "/tokenize", {"messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200 and tok["count"] > 3, tok


def test_chat_logprobs(port):
    status, body = post(port, "/v1/chat/completions", dict(CHAT, logprobs=True, top_logprobs=3))
    assert status == 200, body
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == body["usage"]["completion_tokens"], content
    assert all(len(t["top_logprobs"]) == 3 and isinstance(t["bytes"], list) for t in content), content[0]
    assert "".join(t["token"] for t in content) == body["choices"][0]["message"]["content"]


def test_bad_requests(port):
    cases = [
        ("/v1/completions", "{not json", 400, None, "malformed JSON"),
        ("/v1/completions", "[1, 2]", 400, None, "JSON object"),
        ("/v1/completions", "", 400, None, "malformed JSON"),
        ("/v1/completions", dict(COMPLETION, n=2), 400, "n", "n"),
        ("/v1/completions", dict(COMPLETION, best_of=3), 400, "best_of", None),
        ("/v1/completions", dict(COMPLETION, presence_penalty=0.5), 400, "presence_penalty", None),
        ("/v1/completions", dict(COMPLETION, logit_bias={"1": 5}), 400, "logit_bias", None),
        ("/v1/completions", dict(COMPLETION, suffix="x"), 400, "suffix", None),
        ("/v1/completions", dict(COMPLETION, frobnicate=1), 400, "frobnicate", "unknown field 'frobnicate'"),
        ("/v1/completions", dict(COMPLETION, temperature="hot"), 400, "temperature", "temperature"),
        ("/v1/completions", dict(COMPLETION, temperature=-1), 400, None, "temperature"),
        ("/v1/completions", dict(COMPLETION, max_tokens=0), 400, "max_tokens", None),
        ("/v1/completions", dict(COMPLETION, max_tokens=5000), 400, "max_tokens", "maximum context length"),
        ("/v1/completions", dict(COMPLETION, prompt="word " * 1100), 400, "prompt", "maximum context length"),
        ("/v1/completions", dict(COMPLETION, prompt=[1, -5]), 400, "prompt", None),
        ("/v1/completions", dict(COMPLETION, prompt=[999999999]), 400, None, "999999999"),
        ("/v1/completions", dict(COMPLETION, prompt={"a": 1}), 400, "prompt", None),
        ("/v1/completions", dict(COMPLETION, prompt=""), 400, "prompt", None),
        ("/v1/completions", dict(COMPLETION, logprobs=21), 400, "logprobs", None),
        ("/v1/completions", dict(COMPLETION, stream_options={"include_usage": True}), 400, "stream_options", None),
        ("/v1/completions", dict(COMPLETION, stream=True, stream_options={"x": 1}), 400, "stream_options", None),
        ("/v1/completions", {"prompt": "a"}, 400, "model", None),
        ("/v1/completions", dict(COMPLETION, min_tokens=10, max_tokens=5), 400, None, "min_tokens"),
        ("/v1/completions", dict(COMPLETION, min_tokens=20, max_tokens=None), 400, None, "min_tokens"),  # 16
        ("/v1/chat/completions", dict(CHAT, messages=[]), 400, "messages", None),
        ("/v1/chat/completions", dict(CHAT, messages=[{"content": "no role"}]), 400, "messages", None),
        ("/v1/chat/completions", dict(CHAT, top_logprobs=2), 400, "top_logprobs", None),
        ("/v1/chat/completions", dict(CHAT, response_format={"type": "json_object"}), 400, "response_format", None),
        ("/v1/chat/completions", dict(CHAT, tool_choice="required"), 400, "tool_choice", None),
        ("/v1/chat/completions", dict(CHAT, tools=[{"type": "function", "function": {"name": "f"}}]), 400,
         "tool_choice", "--enable-auto-tool-choice"),
        ("/v1/chat/completions", dict(CHAT, tools=[{"type": "function"}]), 400, "tools", None),
        ("/tokenize", {"prompt": 5}, 400, "prompt", None),
        ("/tokenize", {"prompt": "a", "model": 7}, 400, "model", "must be a string"),
        ("/detokenize", {"tokens": [1], "extra": 1}, 400, "extra", "unknown field"),
        ("/detokenize", {"tokens": [1, 10**9]}, 400, "tokens", None),
    ]
    for path, body, want_status, want_param, want_text in cases:
        status, reply = post(port, path, body)
        try:
            check_error(status, reply, want_status, want_param, want_text)
        except AssertionError as e:
            raise AssertionError(f"{path} {str(body)[:80]}: {e}") from None
    # Bytes that are not UTF-8 inside a JSON string.
    status, _, data = request(port, "POST", "/v1/completions", b'{"model": "demo", "prompt": "\xff\xfe"}')
    check_error(status, json.loads(data), 400)
    # A huge stop list and deep nesting stay errors, not crashes.
    status, reply = post(port, "/v1/completions", "[" * 60000)
    check_error(status, reply, 400, None, "deeper")


def test_hostile_bodies(port):
    # Every field given values of every JSON type, and random bytes: each gets an answer (200 or an OpenAI
    # error), and the server stays up.
    import random
    rng = random.Random(5)
    values = [None, True, -1, 0, 3, 2**63, -2**70, 1e300, 0.5, "", "x" * 50, "\u0000", [], [1, "a"], [[1], [2]], {},
              {"a": {"b": []}}, [{"role": "user", "content": 5}]]
    fields = ["model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
              "min_p", "seed", "stop", "stop_token_ids", "ignore_eos", "min_tokens", "skip_special_tokens",
              "logprobs", "top_logprobs", "echo", "stream", "stream_options", "tools", "tool_choice",
              "chat_template_kwargs", "n", "user", "add_generation_prompt"]
    for i in range(300):
        path = rng.choice(["/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"])
        base = dict(COMPLETION if "chat" not in path else CHAT, max_tokens=2)
        for field in rng.sample(fields, rng.randint(1, 3)):
            base[field] = rng.choice(values)
        body = json.dumps(base) if i % 10 else bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        status, ctype, data = request(port, "POST", path, body)
        if status != 200:
            check_error(status, json.loads(data), status)
        elif ctype == "text/event-stream":
            assert data.endswith(b"data: [DONE]\n\n"), data[-100:]
        else:
            json.loads(data)
    assert request(port, "GET", "/health")[0] == 200


def test_not_found_and_method(port):
    status, reply = post(port, "/v1/completions", dict(COMPLETION, model="gpt-4"))
    check_error(status, reply, 404, "model", "'gpt-4' does not exist")
    status, _, data = request(port, "GET", "/v1/nothing")
    check_error(status, json.loads(data), 404, None, "not found")
    status, _, data = request(port, "GET", "/v1/completions")
    check_error(status, json.loads(data), 405)


def test_body_limit(port):  # the main server runs with --max-request-body-bytes 65536
    status, reply = post(port, "/v1/completions", dict(COMPLETION, prompt="x" * 70000))
    check_error(status, reply, 413, None, "65536")
    # Announced but never sent: refused from the head alone.
    code, _ = raw(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
    assert code == 413, code


def test_malformed_http(port):
    for data in (b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header Line\r\n\r\n",
                 b"POST /v1/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                 b"GET /health HTTP/1.1\r\n" + b"X-Big: " + b"y" * 20000 + b"\r\n\r\n"):
        code, reply = raw(port, data)
        assert code in (400, 413), (data[:40], code, reply[:200])
    # A body cut short (the client leaves) and a client that connects and says nothing harm nobody.
    raw(port, b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"model\"", read=False)
    socket.create_connection(("127.0.0.1", port)).close()
    assert request(port, "GET", "/health")[0] == 200


def test_expect_continue(port):
    # curl sends "Expect: 100-continue" for bodies over 1 KiB and waits for the go-ahead before the body.
    body = json.dumps(dict(COMPLETION, prompt="word " * 300, max_tokens=2)).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert s.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        assert s.recv(4096).startswith(b"HTTP/1.1 200 OK")
    code, _ = raw(port, b"POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 70000\r\n\r\n")
    assert code == 413, code


def test_keep_alive(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for path in ("/health", "/v1/models"):
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200
    conn.request("POST", "/v1/completions", body=json.dumps(dict(COMPLETION, stream=True)))
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read().endswith(b"data: [DONE]\n\n")
    conn.request("GET", "/health")  # the same connection after a stream
    assert conn.getresponse().status == 200
    conn.close()


def wait_idle(port, aborted_before, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        m = metrics(port)
        if (metric(m, "num_requests_running") == 0 and metric(m, "kv_cache_usage_perc") == 0 and
                metric(m, "request_success_total", finished_reason="abort") > aborted_before):
            return m
        time.sleep(0.02)
    raise AssertionError(f"still busy after {seconds} s: {m}")


def test_disconnect_mid_stream(port):
    long = dict(COMPLETION, max_tokens=1000, ignore_eos=True, stream=True)
    for streamed in (True, False):
        aborted = metric(metrics(port), "request_success_total", finished_reason="abort")
        body = json.dumps(dict(long, stream=streamed)).encode()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        if streamed:
            assert s.recv(4096).startswith(b"HTTP/1.1 200"), "no stream"
        deadline = time.time() + 10
        while metric(metrics(port), "num_requests_running") != 1:  # running (the engine's stats of its last step)
            assert time.time() < deadline, "the request never ran"
            time.sleep(0.01)
        start = time.time()
        s.close()
        # 1,000 tokens take seconds; the abort comes at the next step, and every KV block is free again.
        wait_idle(port, aborted, 2.0)
        assert time.time() - start < 2.0


def test_metrics(port):
    m = metrics(port)
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        metric(m, name)
    for name in ("prefix_cache_queries_total", "prefix_cache_hits_total", "prompt_tokens_total",
                 "generation_tokens_total", "num_preemptions_total"):
        assert metric(m, name) >= 0
    assert metric(m, "generation_tokens_total") > 0 and metric(m, "prompt_tokens_total") > 0
    assert metric(m, "request_success_total", finished_reason="length") > 0
    for name in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
                 "request_queue_time_seconds"):
        count = metric(m, name + "_count")
        assert count > 0 and metric(m, name + "_bucket", le="+Inf") == count, name
    assert metric(m, "time_to_first_token_seconds_bucket", le="0.001") <= metric(
        m, "time_to_first_token_seconds_bucket", le="2560")


async def one_stream(port, i):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": "demo", "prompt": f"Request number {i}", "max_tokens": 2, "ignore_eos": True,
                       "temperature": 0, "stream": True}).encode()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" %
                 (len(body), body))
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, chunked = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    body = b""
    while True:  # de-chunk
        size_line, _, rest = chunked.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        body += rest[:size]
        chunked = rest[size + 2:]
    evs = events(body)
    assert evs[-1] == "[DONE]" and evs[-2]["choices"][0]["finish_reason"] == "length", evs
    return len(evs)


def test_thousand_streams(port):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))

    async def run():
        return await asyncio.gather(*(one_stream(port, i) for i in range(1000)))

    start = time.time()
    counts = asyncio.run(run())
    assert len(counts) == 1000
    print(f"  1000 concurrent streams in {time.time() - start:.1f} s")
    wait_idle(port, -1, 5.0)


def test_load_generator(port):
    # `nanovllm bench-serve` (streamed completions with token-id prompts and include_usage) against this server.
    import os
    import random
    import tempfile
    rng = random.Random(3)
    workload = {"prompt_token_ids": [[rng.randrange(100, 50000) for _ in range(rng.randint(5, 40))] for _ in range(24)],
                "max_tokens": [rng.randint(2, 8) for _ in range(24)], "ignore_eos": True}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(workload, f)
    try:
        proc = subprocess.run([NANOVLLM, "bench-serve", "--base-url", f"http://127.0.0.1:{port}", "--workload", f.name,
                               "--request-rate", "50", "--max-concurrency", "8"],
                              capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(f.name)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert re.search(r"completed requests:\s+24\b", out) and re.search(r"failed requests:\s+0\b", out), out
    assert re.search(rf"output tokens:\s+{sum(workload['max_tokens'])}\b", out), out


# ---- tests on servers of their own ----

def test_bad_flags():
    for flags, message in ((["--reasoning-parser", "deepseek"], "--reasoning-parser must be qwen3"),
                           (["--tool-call-parser", "mistral"], "--tool-call-parser must be hermes"),
                           (["--enable-auto-tool-choice"], "needs --tool-call-parser hermes"),
                           (["--host", "not-an-ip"], "--host must be an IP address"),
                           (["--host", "not\nan-ip"], "--host must be an IP address, got 'not\\nan-ip'"),
                           (["--port", "70000"], "--port must be in [0, 65535]"),
                           (["--logprobs", "2"], "request fields")):
        port = [] if "--port" in flags else ["--port", "0"]
        proc = subprocess.run([NANOVLLM, "serve", "--model", MODEL, *port, *ENGINE, *flags],
                              capture_output=True, text=True, timeout=60)
        lines = [l for l in proc.stderr.splitlines() if not l.startswith("nanovllm: ")]
        assert proc.returncode == 1 and len(lines) == 1 and message in lines[0], (flags, proc.returncode, proc.stderr)
    # A port that is taken.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = subprocess.run([NANOVLLM, "serve", "--model", MODEL, "--port", str(taken.getsockname()[1]), *ENGINE],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and "cannot listen on 127.0.0.1:" in proc.stderr, proc.stderr


def test_default_max_tokens():
    # vLLM's defaults: 16 for completions; for chat, all that fits in max_model_len (ignore_eos runs it out).
    server = Server("--max-model-len", "128")
    try:
        status, body = post(server.port, "/v1/completions", {"model": "demo", "prompt": "a", "ignore_eos": True})
        assert status == 200 and body["usage"]["completion_tokens"] == 16, body
        status, body = post(server.port, "/v1/chat/completions", dict(CHAT, max_tokens=None, ignore_eos=True))
        assert status == 200 and body["usage"]["total_tokens"] == 128, body["usage"]
        assert body["choices"][0]["finish_reason"] == "length", body["choices"][0]
        # min_tokens is checked against that default, not against 16.
        status, body = post(server.port, "/v1/chat/completions", dict(CHAT, max_tokens=None, min_tokens=40))
        assert status == 200 and body["usage"]["completion_tokens"] >= 40, body
    finally:
        assert server.stop() == 0


def test_api_key_and_queue_bound():
    server = Server("--api-key", "s3cret", "--max-num-seqs", "1", "--max-waiting-requests", "0")
    try:
        port = server.port
        status, reply = post(port, "/v1/completions", COMPLETION)
        check_error(status, reply, 401, None, "missing API key")
        status, reply = post(port, "/v1/completions", COMPLETION, {"Authorization": "Bearer wrong"})
        check_error(status, reply, 401, None, "invalid API key")
        status, _, data = request(port, "GET", "/v1/models")
        assert status == 401, status
        assert request(port, "GET", "/health")[0] == 200  # as vLLM: only /v1/* needs the key
        key = {"Authorization": "Bearer s3cret"}
        assert post(port, "/v1/completions", COMPLETION, key)[0] == 200
        # One request runs (max_num_seqs 1), none may wait: the next one gets 503, and one after it ends runs.
        body = json.dumps(dict(COMPLETION, max_tokens=1000, ignore_eos=True, stream=True)).encode()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nAuthorization: Bearer s3cret\r\nContent-Length: %d\r\n\r\n%s" %
                  (len(body), body))
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        status, reply = post(port, "/v1/completions", COMPLETION, key)
        check_error(status, reply, 503, None, "queue bound")
        s.close()
        deadline = time.time() + 5
        while post(port, "/v1/completions", COMPLETION, key)[0] != 200:
            assert time.time() < deadline, "the bound never freed up"
            time.sleep(0.05)
    finally:
        assert server.stop() == 0


def test_sigterm_with_streams_in_flight():
    server = Server()
    port = server.port
    body = json.dumps(dict(COMPLETION, max_tokens=1000, ignore_eos=True, stream=True)).encode()
    sockets = []
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        sockets.append(s)
    idle = socket.create_connection(("127.0.0.1", port), timeout=20)  # keep-alive, no request: just closed
    for s in sockets:
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    start = time.time()
    server.proc.send_signal(signal.SIGTERM)
    for s in sockets:  # each stream gets its last chunk, [DONE], the last HTTP chunk, then the close
        data = b""
        while piece := s.recv(65536):
            data += piece
        assert data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), data[-200:]
        assert b'"finish_reason":"abort"' in data, data[-400:]
        s.close()
    assert idle.recv(10) == b""
    assert server.proc.wait(20) == 0
    assert time.time() - start < 10
    assert "stopped" in server.proc.stdout.read()


def main():
    server = Server("--max-model-len", "1024", "--num-kvcache-blocks", "1200", "--max-request-body-bytes", "65536")
    tests = [(name, fn) for name, fn in globals().items() if name.startswith("test_")]
    failed = []
    try:
        for name, fn in tests:
            start = time.time()
            try:
                fn(server.port) if fn.__code__.co_argcount == 1 else fn()
                print(f"ok   {name} ({time.time() - start:.1f} s)", flush=True)
            except Exception as e:  # report and run on: one failing case must not hide the others
                failed.append(name)
                print(f"FAIL {name}: {type(e).__name__}: {str(e)[:2000]}", flush=True)
                traceback.print_exc(limit=3)
        assert server.proc.poll() is None, "the server died"
    finally:
        rc = server.stop()
        if rc != 0:
            failed.append(f"exit code {rc}")
            print(server.proc.stderr.read()[-3000:])
    print(f"{len(tests) - len(failed)} passed, {len(failed)} failed" + (f": {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
