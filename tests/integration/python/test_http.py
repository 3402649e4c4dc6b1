"""The HTTP listener (--http_port) of the real binary, below the client
libraries: the Open Inference Protocol's REST form and Triton's generate
extension with curl (the same text as gRPC's greedy Generate); Server-Sent Events framed byte for byte (chunked transfer coding,
"data: <json>\\n\\n" events, "data: [DONE]\\n\\n" last), the same greedy text as
the whole answer, a client that disconnects mid-stream frees its slot (the
cancel path), the listener's refusals (413, 404, 405, malformed JSON), the
metrics' protocol label and the drain's 503 with Retry-After."""
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
import unittest

import harness

MODEL = "performer-fortunes"
REPO_MODELS = os.path.join(harness.REPO, "models")
PROMPT = "Q:\tWhat is the meaning of life?\nA:\t"


class HttpServer(harness.MetricsServer):
    """A MetricsServer with an HTTP port (http_port once started)."""

    def __init__(self, flags=(), name="http"):
        super().__init__(REPO_MODELS, flags, name)
        self.http_port_file = os.path.join(self.workdir, "http_port")
        self.http_port = None

    def command(self):
        return super().command() + ["--http_port=0",
                                    "--http_port_file=%s" % self.http_port_file]

    def start(self, timeout=harness.STARTUP_TIMEOUT_S):
        super().start(timeout)
        self.http_port = harness.read_port_file(self.http_port_file)
        return self

    def post(self, path, body, timeout=60, headers=None):
        """(status, headers dict, body bytes) of one POST."""
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=timeout)
        try:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            conn.request("POST", path, data, {"Content-Type": "application/json",
                                              **(headers or {})})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()


def raw_exchange(port, request, timeout=60):
    """Sends `request` bytes, returns every byte until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while True:
            data = s.recv(65536)
            if not data:
                return out
            out += data


def dechunk(body):
    """The payload of a chunked body; fails on any framing error."""
    out = b""
    while True:
        line_end = body.index(b"\r\n")
        size = int(body[:line_end], 16)
        chunk = body[line_end + 2:line_end + 2 + size]
        assert len(chunk) == size, "short chunk"
        assert body[line_end + 2 + size:line_end + 4 + size] == b"\r\n", "chunk not ended by CRLF"
        body = body[line_end + 4 + size:]
        if size == 0:
            assert body == b"", "bytes after the last chunk: %r" % body[:80]
            return out
        out += chunk


def completion_request(body):
    data = json.dumps(body).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(data)) + data


class HttpTest(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = HttpServer(["--max_batch=1", "--max_message_bytes=65536",
                                 "--step_delay_ms=5"]).start()

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()

    def test_sse_framing_byte_for_byte(self):
        whole_status, _, whole = self.server.post("/v1/completions", {
            "model": MODEL, "prompt": PROMPT, "max_tokens": 24, "temperature": 0})
        self.assertEqual(whole_status, 200, whole)
        expected_text = json.loads(whole)["choices"][0]["text"]

        raw = raw_exchange(self.server.http_port, completion_request({
            "model": MODEL, "prompt": PROMPT, "max_tokens": 24, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}))
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        self.assertEqual(lines[0], b"HTTP/1.1 200 OK")
        self.assertIn(b"Content-Type: text/event-stream", lines)
        self.assertIn(b"Transfer-Encoding: chunked", lines)
        self.assertIn(b"Cache-Control: no-cache", lines)
        events = dechunk(body).decode()
        self.assertTrue(events.endswith("data: [DONE]\n\n"), events[-200:])
        parts = events.split("\n\n")
        self.assertEqual(parts[-1], "")
        self.assertEqual(parts[-2], "data: [DONE]")
        chunks = []
        for part in parts[:-2]:
            self.assertTrue(part.startswith("data: "), part)
            self.assertNotIn("\n", part)
            chunks.append(json.loads(part[len("data: "):]))
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        self.assertEqual(text, expected_text)
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], "length")
        self.assertEqual(chunks[-1]["choices"], [])
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 24)
        ids = {c["id"] for c in chunks}
        self.assertEqual(len(ids), 1, ids)

    def test_responses_events_framed_in_order(self):
        data = json.dumps({"model": MODEL, "input": "Hi", "max_output_tokens": 8,
                           "stream": True, "store": False}).encode()
        raw = raw_exchange(self.server.http_port, (
            b"POST /v1/responses HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data)) + data)
        head, _, body = raw.partition(b"\r\n\r\n")
        self.assertIn(b"Content-Type: text/event-stream", head.split(b"\r\n"))
        events = dechunk(body).decode().split("\n\n")
        self.assertEqual(events[-1], "")
        sequence = []
        for event in events[:-1]:
            kind, data_line = event.split("\n")
            self.assertTrue(kind.startswith("event: "), event)
            self.assertTrue(data_line.startswith("data: "), event)
            payload = json.loads(data_line[len("data: "):])
            self.assertEqual(payload["type"], kind[len("event: "):])
            sequence.append(payload["sequence_number"])
        self.assertEqual(sequence, list(range(len(sequence))))
        self.assertEqual(json.loads(events[0].split("\n")[1][6:])["type"], "response.created")
        final = json.loads(events[-2].split("\n")[1][6:])
        self.assertEqual(final["type"], "response.incomplete")
        self.assertFalse(final["response"]["store"])
        self.assertEqual(final["response"]["usage"]["output_tokens"], 8)

    def test_a_client_that_disconnects_frees_its_slot(self):
        before = self.cancelled()
        # One slot (--max_batch=1); 2,000 tokens at >= 5 ms a step would hold it 10 s.
        with socket.create_connection(("127.0.0.1", self.server.http_port), timeout=30) as s:
            s.sendall(completion_request({"model": MODEL, "prompt": "a", "max_tokens": 2000,
                                          "ignore_eos": True, "stream": True}))
            got = b""
            while b"data: " not in got:
                got += s.recv(4096)
            # The one slot is in use: what the inference gateway's endpoint
            # picker reads as the "KV-cache utilization".
            self.assertEqual(harness.metric_values(
                self.server.metrics(), "performer_engine_state_memory_utilization",
                model=MODEL), [1.0])
        start = time.monotonic()
        status, _, body = self.server.post("/v1/completions", {
            "model": MODEL, "prompt": "b", "max_tokens": 4}, timeout=30)
        self.assertEqual(status, 200, body)
        self.assertLess(time.monotonic() - start, 5.0, "the slot was not freed")
        deadline = time.monotonic() + 10
        while self.cancelled() <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertGreater(self.cancelled(), before)

    def cancelled(self):
        return sum(harness.metric_values(self.server.metrics(), "performer_requests_total",
                                         protocol="openai", method="completions",
                                         code="CANCELLED"))

    def test_requests_are_counted_under_protocol_openai(self):
        def ok():
            return sum(harness.metric_values(self.server.metrics(), "performer_requests_total",
                                             protocol="openai", method="chat.completions",
                                             code="OK", model=MODEL))
        before = ok()
        status, _, body = self.server.post("/v1/chat/completions", {
            "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        self.assertEqual(status, 200, body)
        # The call is counted when its exchange ends, which may be just after
        # the client has read the answer.
        deadline = time.monotonic() + 5
        while ok() < before + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(ok(), before + 1)

    def curl(self, path, body=None):
        """(HTTP status, body text) of curl on the HTTP port."""
        command = ["curl", "-s", "-w", "\n%{http_code}",
                   "http://127.0.0.1:%d%s" % (self.server.http_port, path)]
        if body is not None:
            command += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        text, _, status = result.stdout.rpartition("\n")
        return int(status), text

    def test_open_inference_protocol_rest_with_curl(self):
        from harness import pb
        greedy = self.server.stub.Generate(pb.GenerateRequest(
            model=MODEL, prompt_text="Once upon", max_new_tokens=12, temperature=0.0),
            timeout=60)
        self.assertEqual(self.curl("/v2/health/live"), (200, '{"live":true}'))
        self.assertEqual(self.curl("/v2/health/ready"), (200, '{"ready":true}'))
        status, text = self.curl("/v2/models/%s" % MODEL)
        self.assertEqual(status, 200, text)
        metadata = json.loads(text)
        self.assertEqual(metadata["versions"], ["1"])
        self.assertIn({"name": "text_input", "datatype": "BYTES", "shape": [1]},
                      metadata["inputs"])
        self.assertEqual(json.loads(self.curl("/v2/models/%s/versions/1/ready" % MODEL)[1]),
                         {"name": MODEL, "ready": True})
        status, text = self.curl("/v2/models/%s/infer" % MODEL, {
            "id": "curl-1", "parameters": {"max_tokens": 12, "temperature": 0},
            "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1],
                        "data": ["Once upon"]}]})
        self.assertEqual(status, 200, text)
        answer = json.loads(text)
        self.assertEqual(answer["id"], "curl-1")
        self.assertEqual(answer["model_version"], "1")
        outputs = {o["name"]: o for o in answer["outputs"]}
        self.assertEqual(outputs["text_output"]["data"], [greedy.text])
        self.assertEqual(outputs["output_ids"]["data"], list(greedy.token_ids))
        self.assertEqual(answer["parameters"]["finish_reason"], "length")
        status, text = self.curl("/v2/models/%s/generate" % MODEL,
                                 {"text_input": "Once upon", "max_tokens": 12, "temperature": 0})
        self.assertEqual(status, 200, text)
        self.assertEqual(json.loads(text)["text_output"], greedy.text)
        status, text = self.curl("/v2/models/%s/generate_stream" % MODEL,
                                 {"text_input": "Once upon", "parameters": {"max_tokens": 12,
                                                                            "temperature": 0}})
        self.assertEqual(status, 200, text)
        events = text.split("\n\n")
        self.assertEqual(events[-1], "")
        pieces = [json.loads(e[len("data: "):]) for e in events[:-1]]
        self.assertEqual("".join(p["text_output"] for p in pieces), greedy.text)
        self.assertEqual(pieces[-1]["finish_reason"], "length")
        # Errors: {"error": message} with the status of the failure.
        status, text = self.curl("/v2/models/nope/infer", {"inputs": []})
        self.assertEqual(status, 404, text)
        self.assertIn("nope", json.loads(text)["error"])
        status, text = self.curl("/v2/models/%s/infer" % MODEL, {
            "inputs": [{"name": "text_input", "datatype": "INT32", "shape": [1], "data": ["x"]}]})
        self.assertEqual(status, 400, text)
        status, text = self.curl("/v2/models/%s/versions/7" % MODEL)
        self.assertEqual(status, 404, text)
        status, text = self.curl("/v2/models/%s/generate" % MODEL,
                                 {"text_input": "a", "max_tokens": "many"})
        self.assertEqual(status, 400, text)
        self.assertIn("parameter max_tokens", json.loads(text)["error"])
        infers = harness.metric_values(self.server.metrics(), "performer_requests_total",
                                       protocol="kserve_v2", method="ModelInfer", code="OK")
        self.assertGreaterEqual(sum(infers), 1)

    def test_refusals(self):
        status, headers, body = self.server.post(
            "/v1/completions", b'{"model": "x", "prompt": "' + b"a" * 70000 + b'"}')
        self.assertEqual(status, 413, body)
        self.assertIn("--max_message_bytes", json.loads(body)["error"]["message"])
        status, _, body = self.server.post("/v1/completions", b'{"model": ')
        self.assertEqual(status, 400, body)
        self.assertEqual(json.loads(body)["error"]["type"], "invalid_request_error")
        status, _, body = self.server.post("/v1/nothing", {})
        self.assertEqual(status, 404, body)
        status, _, body = self.server.post("/v1/models", {})
        self.assertEqual(status, 405, body)
        status, _, body = self.server.post("/v1/completions", {"model": MODEL, "prompt": "a",
                                                               "max_tokens": 999999})
        self.assertEqual(status, 400, body)
        # In the API's words: the parameter the client sent, not performer.v1's field.
        error = json.loads(body)["error"]
        self.assertEqual(error["param"], "max_tokens", body)
        self.assertTrue(error["message"].startswith("max_tokens: 999999 exceeds"), body)
        self.assertNotIn("max_new_tokens ", error["message"])
        status, _, body = self.server.post(
            "/v1/chat/completions", {"model": MODEL, "max_completion_tokens": 999999,
                                     "messages": [{"role": "user", "content": "a"}]})
        self.assertEqual(status, 400, body)
        self.assertEqual(json.loads(body)["error"]["param"], "max_completion_tokens", body)
        status, _, body = self.server.post("/v1/completions", {"model": "nope", "prompt": "a"})
        self.assertEqual(status, 404, body)
        self.assertIn("(see GET /v1/models)", json.loads(body)["error"]["message"])
        # The server still answers.
        status, _, body = self.server.post("/v1/completions", {"model": MODEL, "prompt": "a",
                                                               "max_tokens": 2})
        self.assertEqual(status, 200, body)


class HttpWithoutChatTemplateTest(unittest.TestCase):
    def test_chat_on_a_model_without_a_template_is_a_400_that_says_so(self):
        repo = harness.ModelRepository("http-no-template")
        repo.add("lm_causal_default")
        port_file = os.path.join(harness.make_temp_dir("http-no-template-port"), "http_port")
        server = harness.Server(repo.dir, ["--http_port=0", "--http_port_file=" + port_file],
                                name="http-no-template").start()
        try:
            port = harness.read_port_file(port_file)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/v1/chat/completions", json.dumps({
                "model": "lm_causal_default", "messages": [{"role": "user", "content": "hi"}]}),
                {"Content-Type": "application/json"})
            response = conn.getresponse()
            error = json.loads(response.read())["error"]
            conn.close()
            self.assertEqual(response.status, 400)
            self.assertEqual(error["param"], "model")
            self.assertIn("no chat template (chat_template.json", error["message"])
        finally:
            server.stop()


class StreamIntervalTest(unittest.TestCase):
    """--stream_interval=4: a request's first token goes out at once, later
    ones in messages of 4, the rest with the end; over gRPC and Server-Sent
    Events alike, and the same tokens as the whole answer."""
    server = None

    @classmethod
    def setUpClass(cls):
        # 20 ms steps: each message leaves before the next token is made, so
        # the sizes are the interval's.
        cls.server = HttpServer(["--max_batch=2", "--stream_interval=4", "--step_delay_ms=20"],
                                name="http-interval").start()

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()

    def test_grpc_messages_carry_the_interval(self):
        req = harness.pb.GenerateRequest(prompt_text=PROMPT, max_new_tokens=11,
                                         temperature=0.0, ignore_eos=True)
        stream = harness.collect_stream(self.server.stub, req)
        self.assertEqual(stream.code, harness.grpc.StatusCode.OK, stream)
        sizes = [len(m.token_ids) for m in stream.messages]
        # The prompt's token and the first step's may come in one engine
        # iteration, before the writer runs: then the first message has 2.
        self.assertIn(sizes[0], (1, 2), sizes)
        self.assertEqual(sizes[1:3], [4, 4], sizes)
        self.assertEqual(sum(sizes), 11, sizes)
        self.assertEqual(len(sizes), 4, sizes)
        self.assertEqual(stream.messages[-1].finish_reason, harness.pb.FINISH_REASON_LENGTH)
        whole = self.server.stub.Generate(req, timeout=60)
        self.assertEqual(stream.tokens, list(whole.token_ids))
        self.assertEqual(stream.text, whole.text)

    def test_sse_events_carry_the_interval(self):
        body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 11, "temperature": 0,
                "ignore_eos": True}
        status, _, whole = self.server.post("/v1/completions", body)
        self.assertEqual(status, 200, whole)
        raw = raw_exchange(self.server.http_port, completion_request(dict(body, stream=True)))
        events = dechunk(raw.partition(b"\r\n\r\n")[2]).decode().split("\n\n")
        texts = [json.loads(e[len("data: "):])["choices"][0]["text"]
                 for e in events if e.startswith("data: {")]
        texts = [t for t in texts if t]
        # 11 tokens: 1 (or 2), 4, 4, then the rest (a byte tokenizer may hold
        # a part of a character back, never a whole message's).
        self.assertEqual(len(texts), 4, texts)
        self.assertEqual("".join(texts), json.loads(whole)["choices"][0]["text"])


class HttpDrainTest(unittest.TestCase):
    def test_drain_answers_503_with_retry_after_and_finishes_running_streams(self):
        server = HttpServer(["--max_batch=2", "--step_delay_ms=20", "--drain_timeout=30s"],
                            name="http-drain").start()
        try:
            result = {}

            def run():
                result["raw"] = raw_exchange(server.http_port, completion_request({
                    "model": MODEL, "prompt": "a", "max_tokens": 60, "ignore_eos": True,
                    "stream": True}))

            streaming = threading.Thread(target=run)
            streaming.start()
            time.sleep(0.5)
            server.signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            status, headers = None, {}
            while time.monotonic() < deadline:
                status, headers, body = server.post("/v1/completions", {
                    "model": MODEL, "prompt": "a", "max_tokens": 2})
                if status == 503:
                    break
                time.sleep(0.05)
            self.assertEqual(status, 503)
            self.assertEqual(headers.get("Retry-After"), "1")
            streaming.join(60)
            self.assertTrue(result["raw"].endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"),
                            result["raw"][-200:])
            self.assertEqual(server.wait(30), 0)
        finally:
            server.kill()


if __name__ == "__main__":
    unittest.main()
