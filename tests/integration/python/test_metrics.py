"""Prometheus metrics, end to end: a real `prometheus` server (Debian's
/usr/bin/prometheus) scrapes performer-serve's /metrics every second, and the
values it stored are checked through its HTTP query API against the traffic
this test drove (exact counts of requests by method and code, tokens,
finished generations by reason, histogram counts); the raw exposition passes
`promtool check metrics` without a warning; and an engine that stops
stepping (--test_stall_engine_after_steps) turns the overall health
NOT_SERVING and its performer_engine_healthy gauge 0 within
--liveness_stall_seconds, while a healthy server stays SERVING.

Servers:
  main       lm_causal_default, encdec_basic, lm_bidir_padmask; clean traffic
             whose counts are known exactly (Generate, GenerateStream, Embed,
             ListModels, GetModel, INVALID_ARGUMENT, NOT_FOUND);
  lifecycle  lm_causal_default with --max_batch=1 --max_queue=1
             --step_delay_ms=100: a client-cancelled stream and unary call,
             a stream ended by the Cancel RPC, an overload
             (RESOURCE_EXHAUSTED), a queued request cancelled before it ran,
             a stream and a unary call past their deadline;
  stalled    (test_engine_stall_turns_health_not_serving only) an engine that
             blocks after 3 steps; killed with SIGKILL at the end.

The Prometheus-based tests skip when /usr/bin/prometheus is absent (Debian
package `prometheus`, which also ships promtool).
"""

import json
import os
import signal
import subprocess
import threading
import time
import unittest
import urllib.parse
import uuid

import grpc

import harness
from harness import pb
from grpc_health.v1 import health_pb2, health_pb2_grpc

PROMETHEUS = os.environ.get("PERFORMER_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL = os.environ.get("PERFORMER_PROMTOOL", "/usr/bin/promtool")

DECODER = "lm_causal_default"    # vocab 100, max_seq_len 48, no eos
ENCDEC = "encdec_basic"          # vocab 50/50, max_seq_len 32, no eos
ENCODER = "lm_bidir_padmask"     # bidirectional: Embed only
PROMPT = [5, 17, 42, 8]
UNARY_NEW_TOKENS = (3, 5, 7)      # one unary Generate each
STREAM_NEW_TOKENS = (4, 6)        # one GenerateStream each
ENCDEC_NEW_TOKENS = 6
LONG = 40                         # lifecycle: 4 + 40 <= 48; 100 ms a step
STEP_MS = 100

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
KIND_LABEL = {pb.MODEL_KIND_DECODER: "decoder",
              pb.MODEL_KIND_ENCODER_DECODER: "encoder-decoder",
              pb.MODEL_KIND_ENCODER: "encoder"}
REASONS = ("length", "eos", "stop_token", "stop_string", "cancelled", "deadline", "error")


def code_name(code):
    return code.name  # grpc.StatusCode.OK -> "OK"


# ---------------------------------------------------------------------------
# Prometheus
# ---------------------------------------------------------------------------

class Prometheus:
    """A prometheus server on 127.0.0.1 scraping `targets` every second."""

    def __init__(self, targets):
        self.dir = harness.make_temp_dir("prometheus")
        self.config = os.path.join(self.dir, "prometheus.yml")
        self.log_path = os.path.join(self.dir, "prometheus.log")
        with open(self.config, "w") as f:
            f.write("global:\n"
                    "  scrape_interval: 1s\n"
                    "  scrape_timeout: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "scrape_configs:\n"
                    "  - job_name: performer\n"
                    "    static_configs:\n"
                    "      - targets: [%s]\n" % ", ".join("'%s'" % t for t in targets))
        self.port = None
        self.proc = None
        self._log = None

    def start(self, timeout=60):
        last_error = None
        for _ in range(3):  # the free port may be taken in between: retry
            self.port = harness.free_port()
            self._log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [PROMETHEUS, "--config.file=%s" % self.config,
                 "--storage.tsdb.path=%s" % os.path.join(self.dir, "data"),
                 "--web.listen-address=127.0.0.1:%d" % self.port,
                 "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                preexec_fn=harness._die_with_parent)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                status, body = harness.http_get(self.url("/-/ready"), timeout=2)
                if status == 200:
                    return self
                last_error = "%s %s" % (status, body[:200])
                time.sleep(0.2)
            self.kill()
        raise RuntimeError("prometheus did not become ready (%s):\n%s"
                           % (last_error, self.log_tail()))

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=harness.KILL_WAIT_S)
        if self._log is not None and not self._log.closed:
            self._log.close()

    def log_tail(self, lines=40):
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join("  | " + line for line in text[-lines:])

    def query(self, expr):
        """Instant query: [(labels without __name__, float value)]."""
        status, body = harness.http_get(
            self.url("/api/v1/query?" + urllib.parse.urlencode({"query": expr})), timeout=10)
        if status != 200:
            raise AssertionError("prometheus query %r: HTTP %s %s" % (expr, status, body[:500]))
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise AssertionError("prometheus query %r: %s" % (expr, answer))
        data = answer["data"]
        if data["resultType"] != "vector":
            raise AssertionError("prometheus query %r: %s result" % (expr, data["resultType"]))
        out = []
        for item in data["result"]:
            labels = dict(item["metric"])
            labels.pop("__name__", None)
            out.append((labels, float(item["value"][1])))
        return out

    def scalar(self, expr):
        """The value of a query that gives one sample (None when it gives none)."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) != 1:
            raise AssertionError("%r gave %d series: %s" % (expr, len(result), result))
        return result[0][1]

    def by(self, expr, *labels, nonzero=True):
        """{(label values...): value} of a vector query (labels Prometheus
        drops because they are empty read as "")."""
        out = {}
        for metric, value in self.query(expr):
            if nonzero and value == 0:
                continue
            key = tuple(metric.get(l, "") for l in labels)
            if len(labels) == 1:
                key = key[0]
            out[key] = value
        return out


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

class StreamInBackground:
    """A GenerateStream in a thread; first_message is set once a message came."""

    def __init__(self, stub, req, timeout=60):
        self.first_message = threading.Event()
        self.result = None
        self.thread = threading.Thread(target=self._run, args=(stub, req, timeout), daemon=True)
        self.thread.start()

    def _run(self, stub, req, timeout):
        self.result = harness.collect_stream(
            stub, req, timeout=timeout, on_message=lambda c, i, m: self.first_message.set())
        self.first_message.set()

    def join(self, timeout=60):
        self.thread.join(timeout)
        return self.result


class Traffic:
    """What the test did to one server, as the server's metrics should count it."""

    def __init__(self):
        self.requests = {}   # (model, method, code name) -> count
        self.finished = {}   # (model, reason) -> count
        self.prompt_tokens = {}
        self.generated_tokens = {}
        self.generations = {}      # model -> generations that produced >= 1 token
        self.inter_token = {}      # model -> sum(tokens - 1) over those

    def rpc(self, model, method, code):
        key = (model, method, code_name(code) if not isinstance(code, str) else code)
        self.requests[key] = self.requests.get(key, 0) + 1

    def generation(self, model, reason, prompt_tokens, tokens):
        self.finished[(model, reason)] = self.finished.get((model, reason), 0) + 1
        self.prompt_tokens[model] = self.prompt_tokens.get(model, 0) + prompt_tokens
        self.generated_tokens[model] = self.generated_tokens.get(model, 0) + tokens
        if tokens > 0:
            self.generations[model] = self.generations.get(model, 0) + 1
            self.inter_token[model] = self.inter_token.get(model, 0) + tokens - 1

    def by_method_code(self):
        out = {}
        for (model, method, code), n in self.requests.items():
            out[(method, code)] = out.get((method, code), 0) + n
        return out

    def by_model_method(self):
        out = {}
        for (model, method, code), n in self.requests.items():
            out[(model, method)] = out.get((model, method), 0) + n
        return out


def health(server, service=""):
    stub = health_pb2_grpc.HealthStub(server.channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def require_cases(*cases):
    harness.require_cases(*cases)


def assert_counts_equal(test, what, expected, actual):
    """One failure listing every (labels): expected vs Prometheus."""
    keys = sorted(set(expected) | set(actual), key=str)
    wrong = ["  %s: expected %s, prometheus %s" % (k, expected.get(k, 0), actual.get(k, 0))
             for k in keys if expected.get(k, 0) != actual.get(k, 0)]
    if wrong:
        test.fail("%s differ:\n%s\nexpected %s\nprometheus %s"
                  % (what, "\n".join(wrong), dict(sorted(expected.items(), key=str)),
                     dict(sorted(actual.items(), key=str))))


# ---------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------

class MetricsTest(unittest.TestCase):
    main = None
    life = None
    prometheus = None
    settled = False

    @classmethod
    def setUpClass(cls):
        require_cases(DECODER, ENCDEC, ENCODER)
        cls.started_at = time.time()
        cls.encdec_io = harness.load_safetensors(
            harness.fixture_dir(ENCDEC) + "/io.safetensors")

        repo = harness.ModelRepository("metrics-main")
        for case in (DECODER, ENCDEC, ENCODER):
            repo.add(case)
        cls.main = harness.MetricsServer(repo.dir, ["--max_batch=4"], name="metrics-main")
        cls.addClassCleanup(cls.main.stop)
        cls.main.start()

        repo = harness.ModelRepository("metrics-life")
        repo.add(DECODER)
        cls.life = harness.MetricsServer(
            repo.dir, ["--max_batch=1", "--max_queue=1", "--step_delay_ms=%d" % STEP_MS],
            name="metrics-life")
        cls.addClassCleanup(cls.life.stop)
        cls.life.start()

        # Before any request: warm-up must not show in the request metrics.
        cls.before_traffic = {"main": cls.main.metrics(), "life": cls.life.metrics()}

        cls.prometheus_missing = None
        if os.access(PROMETHEUS, os.X_OK):
            cls.prometheus = Prometheus([cls.main.metrics_address, cls.life.metrics_address])
            cls.addClassCleanup(cls.prometheus.kill)
            cls.prometheus.start()
        else:
            cls.prometheus_missing = ("%s is absent (apt-get install prometheus, or set "
                                      "PERFORMER_PROMETHEUS)" % PROMETHEUS)

        cls.main_traffic = Traffic()
        cls.life_traffic = Traffic()
        cls.drive_main()
        cls.drive_lifecycle()
        cls.traffic_done_at = time.time()

    # -- traffic -----------------------------------------------------------
    @classmethod
    def check(cls, condition, message):
        if not condition:
            raise AssertionError("traffic: " + message)

    @classmethod
    def drive_main(cls):
        """Known traffic on the main server; every count goes into main_traffic."""
        stub = cls.main.stub
        t = cls.main_traffic

        def unary(k):
            return harness.unary(stub, harness.request(DECODER, PROMPT, max_new_tokens=k,
                                                       temperature=0.0))

        def stream(k):
            return harness.collect_stream(stub, harness.request(DECODER, PROMPT,
                                                                max_new_tokens=k,
                                                                temperature=0.0))

        # Unary and streaming generations, all at once (the engine batches them).
        jobs = [(unary, k) for k in UNARY_NEW_TOKENS] + [(stream, k) for k in STREAM_NEW_TOKENS]
        results = harness.run_in_threads(lambda fn, k: fn(k), jobs)
        for (fn, k), r in zip(jobs, results):
            cls.check(not isinstance(r, BaseException), "%s: %r" % (fn.__name__, r))
            if fn is unary:
                response, code, details, _ = r
                cls.check(code == grpc.StatusCode.OK, "Generate: %s %s" % (code, details))
                tokens, last = list(response.token_ids), response
                method = "Generate"
            else:
                cls.check(r.code == grpc.StatusCode.OK, "GenerateStream: %r" % r)
                tokens, last = r.tokens, r.last
                method = "GenerateStream"
            cls.check(len(tokens) == k, "%s: %d tokens, asked %d" % (method, len(tokens), k))
            cls.check(last.finish_reason == pb.FINISH_REASON_LENGTH,
                      "%s: finish %s" % (method, harness.finish_name(last.finish_reason)))
            cls.check(last.usage.prompt_tokens == len(PROMPT), "usage: %s" % last.usage)
            t.rpc(DECODER, method, "OK")
            t.generation(DECODER, "length", last.usage.prompt_tokens, len(tokens))

        # Encoder-decoder: prompt tokens = decoder prompt + source.
        io = cls.encdec_io
        req = pb.GenerateRequest(model=ENCDEC, max_new_tokens=ENCDEC_NEW_TOKENS, temperature=0.0)
        req.source_tokens.CopyFrom(pb.TokenIds(ids=io["gen_enc_tokens"].values))
        req.prompt_tokens.CopyFrom(pb.TokenIds(ids=io["gen_start"].values))
        encdec_prompt = len(io["gen_enc_tokens"].values) + len(io["gen_start"].values)
        response, code, details, _ = harness.unary(stub, req)
        cls.check(code == grpc.StatusCode.OK, "encdec Generate: %s %s" % (code, details))
        cls.check(len(response.token_ids) == ENCDEC_NEW_TOKENS, "encdec: %s" % response)
        cls.check(response.usage.prompt_tokens == encdec_prompt, "encdec usage: %s"
                  % response.usage)
        t.rpc(ENCDEC, "Generate", "OK")
        t.generation(ENCDEC, "length", encdec_prompt, len(response.token_ids))
        r = harness.collect_stream(stub, req)
        cls.check(r.code == grpc.StatusCode.OK and len(r.tokens) == ENCDEC_NEW_TOKENS,
                  "encdec stream: %r" % r)
        cls.check(r.last.finish_reason == pb.FINISH_REASON_LENGTH, "encdec stream: %r" % r)
        t.rpc(ENCDEC, "GenerateStream", "OK")
        t.generation(ENCDEC, "length", encdec_prompt, len(r.tokens))

        # Refused requests: a token outside the vocabulary (resolved model),
        # an unknown model (model "").
        bad = harness.request(DECODER, [1, 100, 2], max_new_tokens=4)
        _, code, details, _ = harness.unary(stub, bad)
        cls.check(code == grpc.StatusCode.INVALID_ARGUMENT, "bad token: %s %s" % (code, details))
        t.rpc(DECODER, "Generate", code)
        r = harness.collect_stream(stub, bad)
        cls.check(r.code == grpc.StatusCode.INVALID_ARGUMENT, "bad token stream: %r" % r)
        t.rpc(DECODER, "GenerateStream", r.code)
        _, code, details, _ = harness.unary(
            stub, harness.request("no-such-model", PROMPT, max_new_tokens=2))
        cls.check(code == grpc.StatusCode.NOT_FOUND, "unknown model: %s %s" % (code, details))
        t.rpc("", "Generate", code)

        # Embed, ListModels, GetModel (each model, and an unknown one).
        embed = stub.Embed(pb.EmbedRequest(model=ENCODER, tokens=pb.TokenIds(ids=[1, 2, 3])),
                           timeout=30)
        cls.check(embed.dim > 0, "Embed: %s" % embed)
        t.rpc(ENCODER, "Embed", "OK")
        listed = stub.ListModels(pb.ListModelsRequest(), timeout=10)
        t.rpc("", "ListModels", "OK")
        cls.main_models = {}
        for m in listed.models:
            cls.main_models[m.name] = cls.main.model_info(m.name)
            t.rpc(m.name, "GetModel", "OK")
        cls.check(set(cls.main_models) == {DECODER, ENCDEC, ENCODER},
                  "ListModels: %s" % sorted(cls.main_models))
        try:
            cls.main.model_info("no-such-model")
            cls.check(False, "GetModel of an unknown model succeeded")
        except grpc.RpcError as e:
            cls.check(e.code() == grpc.StatusCode.NOT_FOUND, "GetModel unknown: %s" % e)
            t.rpc("", "GetModel", e.code())

    @classmethod
    def life_get_model(cls):
        info = cls.life.model_info(DECODER)
        cls.life_traffic.rpc(DECODER, "GetModel", "OK")
        return info

    @classmethod
    def life_wait(cls, predicate, what, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            info = cls.life_get_model()
            if predicate(info):
                return info
            cls.check(time.monotonic() < deadline, "%s: %s" % (what, info))
            time.sleep(0.05)

    @classmethod
    def life_idle(cls):
        cls.life_wait(lambda m: m.active_sequences == 0 and m.queued_requests == 0, "not idle")

    @classmethod
    def life_cancel(cls, request_id):
        response = cls.life.stub.Cancel(pb.CancelRequest(request_id=request_id), timeout=10)
        cls.life_traffic.rpc("", "Cancel", "OK")
        cls.check(response.cancelled, "Cancel(%s) cancelled nothing" % request_id)

    @classmethod
    def life_cancel_running(cls, request_id, stream, what):
        """Cancels a running stream with the Cancel RPC: it must end OK with
        reason cancelled; records it and waits for the engine to go idle."""
        cls.life_cancel(request_id)
        r = stream.join(30)
        cls.check(r is not None and r.code == grpc.StatusCode.OK and r.last is not None
                  and r.last.finish_reason == pb.FINISH_REASON_CANCELLED, "%s: %r" % (what, r))
        cls.life_traffic.rpc(DECODER, "GenerateStream", "OK")
        cls.life_traffic.generation(DECODER, "cancelled", r.last.usage.prompt_tokens,
                                    r.last.usage.generated_tokens)
        cls.life_min_tokens += r.last.usage.generated_tokens
        cls.life_with_tokens += 1 if r.tokens else 0
        cls.life_idle()

    @classmethod
    def drive_lifecycle(cls):
        """Cancels, overload and a deadline on the slow one-slot server.
        Where the server's own count is not known to the client (tokens
        generated after a client cancel or past a deadline), only the lower
        bound life_min_tokens is kept."""
        stub = cls.life.stub
        t = cls.life_traffic
        cls.life_min_tokens = 0
        cls.life_with_tokens = 0  # generations the client saw a token of

        def long_request(request_id, **fields):
            fields.setdefault("max_new_tokens", LONG)
            return harness.request(DECODER, PROMPT, request_id=request_id, temperature=0.0,
                                   **fields)

        # 1. The client cancels a running stream: CANCELLED / reason cancelled.
        call = stub.GenerateStream(long_request("client-cancel-" + uuid.uuid4().hex), timeout=60)
        first = next(call)
        received = len(first.token_ids)
        call.cancel()
        code = None
        try:
            for m in call:
                received += len(m.token_ids)
        except grpc.RpcError as e:
            code = e.code()
        cls.check(code == grpc.StatusCode.CANCELLED, "client cancel: %s" % code)
        t.rpc(DECODER, "GenerateStream", "CANCELLED")
        t.finished[(DECODER, "cancelled")] = t.finished.get((DECODER, "cancelled"), 0) + 1
        cls.life_min_tokens += received
        cls.life_with_tokens += 1 if received else 0
        cls.life_idle()

        # 1b. The client cancels a running unary Generate: CANCELLED as well
        # (whatever the engine made of it, the client got no OK).
        future = stub.Generate.future(long_request("client-cancel-unary-" + uuid.uuid4().hex),
                                      timeout=60)
        cls.life_wait(lambda m: m.active_sequences == 1, "unary request never got a slot")
        time.sleep(0.3)
        future.cancel()
        cls.check(future.cancelled(), "unary Generate not cancelled: %s" % future)
        t.rpc(DECODER, "Generate", "CANCELLED")
        t.finished[(DECODER, "cancelled")] = t.finished.get((DECODER, "cancelled"), 0) + 1
        cls.life_idle()

        # 2. The Cancel RPC ends a running stream normally (OK, reason cancelled).
        request_id = "cancel-rpc-" + uuid.uuid4().hex
        s = StreamInBackground(stub, long_request(request_id))
        cls.check(s.first_message.wait(30), "cancel-rpc: no first message")
        cls.life_cancel_running(request_id, s, "cancel-rpc")

        # 3. Overload: one running, one queued, the third is refused; then the
        # queued one is cancelled before it ran, and the running one.
        holder_id, queued_id = "holder-" + uuid.uuid4().hex, "queued-" + uuid.uuid4().hex
        holder = StreamInBackground(stub, long_request(holder_id))
        cls.check(holder.first_message.wait(30), "holder: no first message")
        queued = StreamInBackground(stub, long_request(queued_id))
        cls.life_wait(lambda m: m.active_sequences == 1 and m.queued_requests == 1,
                      "second request not queued")
        _, code, details, _ = harness.unary(stub, long_request("third-" + uuid.uuid4().hex))
        cls.check(code == grpc.StatusCode.RESOURCE_EXHAUSTED, "overload: %s %s" % (code, details))
        t.rpc(DECODER, "Generate", code)
        cls.life_cancel(queued_id)
        r = queued.join(30)
        cls.check(r is not None and r.code == grpc.StatusCode.OK and not r.tokens,
                  "queued: %r" % r)
        cls.check(not r.messages or r.last.finish_reason == pb.FINISH_REASON_CANCELLED,
                  "queued: %r" % r)
        t.rpc(DECODER, "GenerateStream", "OK")
        # A generation that reached the engine (its queue) and never ran.
        t.generation(DECODER, "cancelled", len(PROMPT), 0)
        cls.life_cancel_running(holder_id, holder, "holder")

        # 4. A stream past its deadline: DEADLINE_EXCEEDED / reason deadline.
        r = harness.collect_stream(stub, long_request("deadline-" + uuid.uuid4().hex),
                                   timeout=0.8)
        cls.check(r.code == grpc.StatusCode.DEADLINE_EXCEEDED, "deadline: %r" % r)
        t.rpc(DECODER, "GenerateStream", "DEADLINE_EXCEEDED")
        t.finished[(DECODER, "deadline")] = t.finished.get((DECODER, "deadline"), 0) + 1
        cls.life_min_tokens += len(r.tokens)
        cls.life_with_tokens += 1 if r.tokens else 0
        cls.life_idle()
        # The same for a unary Generate (its tokens are lost with the call).
        _, code, details, _ = harness.unary(
            stub, long_request("deadline-unary-" + uuid.uuid4().hex), timeout=0.8)
        cls.check(code == grpc.StatusCode.DEADLINE_EXCEEDED, "unary deadline: %s %s"
                  % (code, details))
        t.rpc(DECODER, "Generate", "DEADLINE_EXCEEDED")
        t.finished[(DECODER, "deadline")] = t.finished.get((DECODER, "deadline"), 0) + 1
        cls.life_idle()

        # 5. Capacity is back: a short request runs to its length.
        response, code, details, _ = harness.unary(stub, long_request(
            "final-" + uuid.uuid4().hex, max_new_tokens=3))
        cls.check(code == grpc.StatusCode.OK and len(response.token_ids) == 3,
                  "final: %s %s" % (code, details))
        t.rpc(DECODER, "Generate", "OK")
        t.generation(DECODER, "length", response.usage.prompt_tokens, 3)
        cls.life_min_tokens += 3
        cls.life_with_tokens += 1
        # Every generation that reached the engine (the refused one did not),
        # the queued one included.
        cls.life_generations = sum(t.finished.values())
        cls.life_prompt_tokens = cls.life_generations * len(PROMPT)
        cls.life_info = cls.life_get_model()

    # -- Prometheus ----------------------------------------------------------
    def require_prometheus(self):
        if self.prometheus is None:
            self.fail(self.prometheus_missing or "prometheus not started")

    def settle(self):
        """Waits until Prometheus has scraped both servers after the traffic
        ended (a scrape that began a second later: counters updated as an
        RPC completes are in) and two scrapes in a row agree."""
        self.require_prometheus()
        cls = type(self)
        if cls.settled:
            return
        prom = self.prometheus
        after = self.traffic_done_at + 1.0
        deadline = time.monotonic() + 30
        instances = (self.main.metrics_address, self.life.metrics_address)

        def scrape_times():
            return [prom.scalar('timestamp(up{job="performer",instance="%s"})' % i)
                    for i in instances]

        def totals():
            return [prom.scalar('sum(performer_requests_total{instance="%s"})' % i)
                    for i in instances]

        while True:
            times = scrape_times()
            if all(t is not None and t >= after for t in times):
                break
            self.assertLess(time.monotonic(), deadline,
                            "prometheus has not scraped both servers since the traffic "
                            "ended: last scrapes %s, traffic ended %.3f\n%s"
                            % (times, self.traffic_done_at, prom.log_tail()))
            time.sleep(0.2)
        for i in instances:
            self.assertEqual(prom.scalar('up{job="performer",instance="%s"}' % i), 1.0,
                             "target %s down" % i)
        previous = (times, totals())
        while True:
            time.sleep(0.3)
            times = scrape_times()
            if any(a == b for a, b in zip(times, previous[0])):
                self.assertLess(time.monotonic(), deadline, "no new scrape")
                continue
            now = totals()
            if now == previous[1]:
                break
            self.assertLess(time.monotonic(), deadline,
                            "performer_requests_total keeps changing: %s -> %s"
                            % (previous[1], now))
            previous = (times, now)
        cls.settled = True

    def q(self, server, name, extra=""):
        """`name{instance=...[,extra]}` for a server."""
        sel = 'instance="%s"' % server.metrics_address
        if extra:
            sel += "," + extra
        return "%s{%s}" % (name, sel)

    # -- tests: main server ---------------------------------------------------
    def test_warmup_not_counted(self):
        for which, samples in sorted(self.before_traffic.items()):
            for name in ("performer_requests_total", "performer_generated_tokens_total",
                         "performer_prompt_tokens_total", "performer_requests_finished_total",
                         "performer_request_duration_seconds_count",
                         "performer_time_to_first_token_seconds_count",
                         "performer_request_generated_tokens_count",
                         "performer_engine_batch_size_count",
                         "performer_engine_tokens_per_step_count"):
                with self.subTest(server=which, metric=name):
                    nonzero = [(n, l, v) for n, l, v in samples if n == name and v != 0]
                    self.assertEqual(nonzero, [], "%s before any request" % name)
            with self.subTest(server=which, metric="performer_engine_healthy"):
                values = harness.metric_values(samples, "performer_engine_healthy")
                self.assertTrue(values, "no performer_engine_healthy series")
                self.assertTrue(all(v == 1 for v in values), values)

    def test_requests_total(self):
        self.settle()
        prom, t = self.prometheus, self.main_traffic
        actual = prom.by("sum by (model, method, code) (%s)"
                         % self.q(self.main, "performer_requests_total"),
                         "model", "method", "code")
        assert_counts_equal(self, "main: performer_requests_total{model,method,code}",
                            t.requests, actual)

    def test_tokens_and_finished(self):
        self.settle()
        prom, t = self.prometheus, self.main_traffic
        assert_counts_equal(self, "main: performer_generated_tokens_total{model}",
                            t.generated_tokens,
                            prom.by(self.q(self.main, "performer_generated_tokens_total"),
                                    "model"))
        assert_counts_equal(self, "main: performer_prompt_tokens_total{model}",
                            t.prompt_tokens,
                            prom.by(self.q(self.main, "performer_prompt_tokens_total"), "model"))
        assert_counts_equal(self, "main: performer_requests_finished_total{model,reason}",
                            t.finished,
                            prom.by(self.q(self.main, "performer_requests_finished_total"),
                                    "model", "reason"))
        reasons = {l.get("reason", "") for l, _ in
                   prom.query(self.q(self.main, "performer_requests_finished_total"))}
        self.assertLessEqual(reasons, set(REASONS), "unknown reason label")

    def test_histograms(self):
        self.settle()
        prom, t = self.prometheus, self.main_traffic
        main = self.main
        # Every RPC counted in requests_total is timed, per model and method.
        assert_counts_equal(self, "main: performer_request_duration_seconds_count{model,method}",
                            t.by_model_method(),
                            prom.by(self.q(main, "performer_request_duration_seconds_count"),
                                    "model", "method"))
        # One observation per generation, per model.
        per_generation = {m: n for (m, _), n in t.finished.items()}
        for name in ("performer_time_to_first_token_seconds",
                     "performer_request_queue_seconds",
                     "performer_prefill_duration_seconds",
                     "performer_request_prompt_tokens",
                     "performer_request_generated_tokens"):
            assert_counts_equal(self, "main: %s_count{model}" % name, per_generation,
                                prom.by(self.q(main, name + "_count"), "model"))
        assert_counts_equal(self, "main: performer_inter_token_latency_seconds_count{model}",
                            t.inter_token,
                            prom.by(self.q(main, "performer_inter_token_latency_seconds_count"),
                                    "model"))
        assert_counts_equal(self, "main: performer_request_generated_tokens_sum{model}",
                            t.generated_tokens,
                            prom.by(self.q(main, "performer_request_generated_tokens_sum"),
                                    "model"))
        assert_counts_equal(self, "main: performer_request_prompt_tokens_sum{model}",
                            t.prompt_tokens,
                            prom.by(self.q(main, "performer_request_prompt_tokens_sum"),
                                    "model"))
        # Every token was emitted by some engine step.
        assert_counts_equal(self, "main: performer_engine_tokens_per_step_sum{model}",
                            t.generated_tokens,
                            prom.by(self.q(main, "performer_engine_tokens_per_step_sum"),
                                    "model"))
        # One batch-size observation per decode step.
        batch = prom.by(self.q(main, "performer_engine_batch_size_count"), "model")
        decode = prom.by(self.q(main, "performer_engine_step_duration_seconds_count",
                                'phase="decode"'), "model")
        prefill = prom.by(self.q(main, "performer_engine_step_duration_seconds_count",
                                 'phase="prefill"'), "model")
        assert_counts_equal(self, "main: engine_batch_size_count vs "
                            "engine_step_duration_seconds_count{phase=decode}", batch, decode)
        for model in (DECODER, ENCDEC):
            with self.subTest(model=model):
                self.assertGreater(batch.get(model, 0), 0, "no decode step of %s" % model)
                self.assertGreater(prefill.get(model, 0), 0, "no prefill step of %s" % model)
                # 1 <= rows of a decode step <= --max_batch (4).
                bsum = prom.scalar(self.q(main, "performer_engine_batch_size_sum",
                                          'model="%s"' % model))
                self.assertGreaterEqual(bsum, batch[model])
                self.assertLessEqual(bsum, batch[model] * 4)
        # The +Inf bucket of every histogram equals its count.
        for name in ("performer_request_duration_seconds", "performer_time_to_first_token_seconds",
                     "performer_inter_token_latency_seconds", "performer_request_queue_seconds",
                     "performer_prefill_duration_seconds", "performer_request_prompt_tokens",
                     "performer_request_generated_tokens", "performer_engine_batch_size",
                     "performer_engine_step_duration_seconds", "performer_engine_tokens_per_step"):
            with self.subTest(histogram=name):
                count = prom.query(self.q(main, name + "_count"))
                self.assertTrue(count, "%s_count: no series" % name)
                inf = prom.by(self.q(main, name + "_bucket", 'le="+Inf"'),
                              "model", "method", "phase", nonzero=False)
                cnt = prom.by(self.q(main, name + "_count"), "model", "method", "phase",
                              nonzero=False)
                self.assertEqual(inf, cnt, "%s: +Inf bucket != count" % name)
                sums = prom.query(self.q(main, name + "_sum"))
                self.assertTrue(all(v >= 0 for _, v in sums), sums)
        # Durations of real work are positive.
        for name in ("performer_request_duration_seconds_sum",
                     "performer_time_to_first_token_seconds_sum",
                     "performer_prefill_duration_seconds_sum"):
            with self.subTest(sum=name):
                total = prom.scalar("sum(%s)" % self.q(main, name))
                self.assertIsNotNone(total, name)
                self.assertGreater(total, 0, name)

    def test_model_info_and_engine_gauges(self):
        self.settle()
        prom, main = self.prometheus, self.main
        info = {l.get("model", ""): (l, v) for l, v in
                prom.query(self.q(main, "performer_model_info"))}
        self.assertEqual(set(info), set(self.main_models), "performer_model_info models")
        for name, model in sorted(self.main_models.items()):
            with self.subTest(model=name):
                labels, value = info[name]
                self.assertEqual(value, 1.0)
                expected = {"kind": KIND_LABEL[model.kind],
                            "vocab_size": str(model.vocab_size),
                            "max_sequence_length": str(model.max_sequence_length),
                            "state_bytes_per_sequence": str(model.state_bytes_per_sequence)}
                got = {k: labels.get(k, "") for k in expected}
                self.assertEqual(got, expected, "performer_model_info{model=%s} labels" % name)
                load = prom.scalar(self.q(main, "performer_model_load_seconds",
                                          'model="%s"' % name))
                self.assertIsNotNone(load, "performer_model_load_seconds{model=%s}" % name)
                self.assertGreater(load, 0)
                self.assertLess(load, harness.STARTUP_TIMEOUT_S)
        now = time.time()
        for name in (DECODER, ENCDEC):
            model = self.main_models[name]
            with self.subTest(model=name, what="engine gauges"):
                def gauge(metric):
                    value = prom.scalar(self.q(main, metric, 'model="%s"' % name))
                    self.assertIsNotNone(value, "%s{model=%s} absent" % (metric, name))
                    return value
                self.assertEqual(gauge("performer_engine_active_sequences"), 0)
                self.assertEqual(gauge("performer_engine_queued_requests"), 0)
                self.assertEqual(gauge("performer_engine_free_slots"), model.max_sequences)
                self.assertEqual(gauge("performer_engine_state_memory_used_bytes"), 0)
                self.assertGreaterEqual(gauge("performer_engine_state_memory_capacity_bytes"),
                                        model.max_sequences * model.state_bytes_per_sequence)
                self.assertEqual(gauge("performer_engine_healthy"), 1)
                last = gauge("performer_engine_last_step_timestamp_seconds")
                self.assertGreaterEqual(last, self.started_at - 1)
                self.assertLessEqual(last, now + 1)
        in_flight = prom.by(self.q(main, "performer_requests_in_flight"), "method",
                            nonzero=False)
        for method in ("Generate", "GenerateStream"):
            self.assertIn(method, in_flight, "performer_requests_in_flight{method=%s}" % method)
        self.assertEqual({m: v for m, v in in_flight.items() if v != 0}, {},
                         "requests in flight after the traffic")

    def test_process_metrics(self):
        self.settle()
        prom = self.prometheus
        for server in (self.main, self.life):
            with self.subTest(server=server.name):
                pid = server.proc.pid

                def value(name):
                    v = prom.scalar(self.q(server, name))
                    self.assertIsNotNone(v, "%s absent" % name)
                    return v
                rss = value("process_resident_memory_bytes")
                vms = value("process_virtual_memory_bytes")
                self.assertGreater(rss, 0)
                self.assertGreaterEqual(vms, rss)
                with open("/proc/%d/statm" % pid) as f:
                    pages = f.read().split()
                page = os.sysconf("SC_PAGE_SIZE")
                now_rss = int(pages[1]) * page
                self.assertGreater(rss, now_rss / 2, "rss %d vs /proc %d" % (rss, now_rss))
                self.assertLess(rss, now_rss * 2, "rss %d vs /proc %d" % (rss, now_rss))
                start = value("process_start_time_seconds")
                now = time.time()
                self.assertGreater(start, now - 3600, "start time more than an hour ago")
                self.assertGreater(start, self.started_at - 60)
                self.assertLessEqual(start, now + 2)
                cpu = value("process_cpu_seconds_total")
                self.assertGreater(cpu, 0)
                self.assertLess(cpu, (now - self.started_at + 5) * (os.cpu_count() or 1))
                fds = value("process_open_fds")
                max_fds = value("process_max_fds")
                self.assertGreater(fds, 0)
                self.assertLessEqual(fds, max_fds)
                with open("/proc/%d/limits" % pid) as f:
                    soft = [line.split()[3] for line in f if line.startswith("Max open files")]
                if soft and soft[0].isdigit():
                    self.assertEqual(max_fds, int(soft[0]), "process_max_fds vs /proc limits")

    # -- tests: lifecycle server -------------------------------------------
    def test_lifecycle_requests_total(self):
        self.settle()
        prom, t, life = self.prometheus, self.life_traffic, self.life
        # Cancel has no model of its own: compare by method and code.
        with self.subTest(by="method,code"):
            actual = prom.by("sum by (method, code) (%s)"
                             % self.q(life, "performer_requests_total"), "method", "code")
            assert_counts_equal(self, "lifecycle: performer_requests_total{method,code}",
                                t.by_method_code(), actual)
        for method in ("Generate", "GenerateStream", "GetModel"):
            with self.subTest(method=method):
                expected = {(m, c): n for (m, meth, c), n in t.requests.items() if meth == method}
                actual = prom.by("sum by (model, code) (%s)"
                                 % self.q(life, "performer_requests_total",
                                          'method="%s"' % method), "model", "code")
                assert_counts_equal(self, "lifecycle: performer_requests_total{method=%s}"
                                    % method, expected, actual)
        with self.subTest(what="request_duration_seconds_count"):
            # Every RPC timed.
            assert_counts_equal(
                self, "lifecycle: performer_request_duration_seconds_count{method}",
                self._by_method(t),
                prom.by("sum by (method) (%s)"
                        % self.q(life, "performer_request_duration_seconds_count"), "method"))

    def test_lifecycle_finished(self):
        self.settle()
        prom, t, life = self.prometheus, self.life_traffic, self.life
        assert_counts_equal(self, "lifecycle: performer_requests_finished_total{model,reason}",
                            t.finished,
                            prom.by(self.q(life, "performer_requests_finished_total"),
                                    "model", "reason"))

    def lifecycle_value(self, name):
        v = self.prometheus.scalar(self.q(self.life, name, 'model="%s"' % DECODER))
        self.assertIsNotNone(v, "%s{model=%s} absent" % (name, DECODER))
        return v

    def test_lifecycle_tokens(self):
        self.settle()
        one = self.lifecycle_value
        generated = one("performer_generated_tokens_total")
        checks = [
            ("generated tokens >= what the clients received (%d)" % self.life_min_tokens,
             lambda: self.assertGreaterEqual(generated, self.life_min_tokens)),
            ("generated tokens <= what was asked",
             lambda: self.assertLessEqual(generated, self.life_generations * LONG)),
            ("prompt_tokens_total: every generation that reached the engine (%d, the queued "
             "one included)" % self.life_generations,
             lambda: self.assertEqual(one("performer_prompt_tokens_total"),
                                      self.life_prompt_tokens)),
            ("request_generated_tokens_count: one per finished generation",
             lambda: self.assertEqual(one("performer_request_generated_tokens_count"),
                                      self.life_generations)),
            ("request_generated_tokens_sum == generated_tokens_total",
             lambda: self.assertEqual(one("performer_request_generated_tokens_sum"), generated)),
            ("request_prompt_tokens_sum == prompt tokens",
             lambda: self.assertEqual(one("performer_request_prompt_tokens_sum"),
                                      self.life_prompt_tokens)),
            ("engine_tokens_per_step_sum == generated_tokens_total",
             lambda: self.assertEqual(one("performer_engine_tokens_per_step_sum"), generated)),
        ]
        for what, check in checks:
            with self.subTest(check=what):
                check()
        with self.subTest(check="time_to_first_token / inter_token_latency counts"):
            ttft = one("performer_time_to_first_token_seconds_count")
            # Every generation but the queued one may have produced a token on
            # the server; the clients saw one of life_with_tokens.
            self.assertGreaterEqual(ttft, self.life_with_tokens)
            self.assertLessEqual(ttft, self.life_generations - 1)
            self.assertEqual(one("performer_inter_token_latency_seconds_count"), generated - ttft,
                             "one inter-token observation per token after the first")

    def test_lifecycle_idle_gauges(self):
        self.settle()
        for name, want in (("performer_engine_active_sequences", 0),
                           ("performer_engine_queued_requests", 0),
                           ("performer_engine_free_slots", self.life_info.max_sequences),
                           ("performer_engine_state_memory_used_bytes", 0),
                           ("performer_engine_healthy", 1)):
            with self.subTest(gauge=name):
                self.assertEqual(self.lifecycle_value(name), want, name)
        in_flight = self.prometheus.by(self.q(self.life, "performer_requests_in_flight"),
                                       "method")
        self.assertEqual(in_flight, {}, "requests in flight after the traffic")

    @staticmethod
    def _by_method(t):
        out = {}
        for (model, method, code), n in t.requests.items():
            out[method] = out.get(method, 0) + n
        return out

    # -- the exported names are the documented ones ---------------------------
    def test_exported_families_match_deploy_list(self):
        # tests/deploy/metric_names.txt is what the alerts, the dashboard and
        # the README table are checked against: it must be exactly what a
        # server hosting a decoder exports.
        listed = {}
        with open(os.path.join(harness.REPO, "tests", "deploy", "metric_names.txt")) as f:
            for line in f:
                fields = line.split("#")[0].split()
                if fields:
                    listed[fields[0]] = fields[1]
        exported = {}
        for line in self.main.metrics_text().splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()
                exported[name] = kind
        self.assertEqual(exported, listed)

    # -- promtool -------------------------------------------------------------
    def test_promtool_check_metrics(self):
        if not os.access(PROMTOOL, os.X_OK):
            self.fail("%s is absent (apt-get install prometheus)" % PROMTOOL)
        for server in (self.main, self.life):
            with self.subTest(server=server.name):
                text = server.metrics_text()
                r = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   timeout=60)
                output = r.stdout.decode("utf-8", "replace")
                self.assertEqual((r.returncode, output), (0, ""),
                                 "promtool check metrics on %s's /metrics" % server.name)

    # -- liveness --------------------------------------------------------------
    def test_engine_stall_turns_health_not_serving(self):
        repo = harness.ModelRepository("metrics-stall")
        repo.add(DECODER)
        repo.add(ENCDEC)
        stalled = harness.MetricsServer(
            repo.dir, ["--max_batch=2", "--test_stall_engine_after_steps=3",
                       "--liveness_stall_seconds=1"], name="metrics-stall")

        def kill():
            # Its engine never returns: SIGKILL, not a drain.
            if stalled.channel is not None:
                stalled.channel.close()
                stalled.channel = None
            stalled.kill()
            if getattr(stalled, "_log", None) is not None and not stalled._log.closed:
                stalled._log.close()
        self.addCleanup(kill)
        stalled.start()

        self.assertEqual(health(stalled), SERVING, "idle engines are healthy")
        self.assertEqual(health(stalled, "liveness"), SERVING, "idle engines are alive")
        samples = stalled.metrics()
        self.assertEqual(harness.metric_values(samples, "performer_engine_healthy",
                                               model=DECODER), [1.0])

        stream = StreamInBackground(stalled.stub, harness.request(
            DECODER, PROMPT, max_new_tokens=LONG, temperature=0.0), timeout=120)
        start = time.monotonic()
        status = SERVING
        while time.monotonic() - start < 10:
            status = health(stalled)
            if status == NOT_SERVING:
                break
            time.sleep(0.1)
        waited = time.monotonic() - start
        self.assertEqual(status, NOT_SERVING,
                         "health(\"\") still %s %.1f s after the engine stalled"
                         % (health_pb2.HealthCheckResponse.ServingStatus.Name(status), waited))
        self.assertIsNone(stream.result, "the stalled stream ended: %r" % stream.result)
        self.assertEqual(health(stalled, "liveness"), NOT_SERVING,
                         "liveness follows the engine heartbeat")

        samples = stalled.metrics()
        info = self.main_models[DECODER]
        for metric, labels, expected, what in (
                ("performer_engine_healthy", {"model": DECODER}, 0,
                 "the stalled engine is unhealthy"),
                ("performer_engine_healthy", {"model": ENCDEC}, 1,
                 "the idle engine of %s stays healthy" % ENCDEC),
                ("performer_engine_active_sequences", {"model": DECODER}, 1,
                 "the stalled request holds its slot"),
                ("performer_requests_in_flight", {"method": "GenerateStream"}, 1,
                 "the stalled stream is in flight"),
                ("performer_engine_state_memory_used_bytes", {"model": DECODER},
                 info.state_bytes_per_sequence, "state memory of the one running sequence")):
            with self.subTest(metric=metric, **labels):
                self.assertEqual(harness.metric_values(samples, metric, **labels),
                                 [float(expected)], "%s%s: %s (one series)"
                                 % (metric, labels, what))
        with self.subTest(metric="performer_engine_last_step_timestamp_seconds"):
            last = harness.metric_values(samples, "performer_engine_last_step_timestamp_seconds",
                                         model=DECODER)
            self.assertTrue(last, "performer_engine_last_step_timestamp_seconds absent")
            self.assertGreaterEqual(time.time() - last[0], 1.0,
                                    "last step at least --liveness_stall_seconds ago")

        # The other servers stay SERVING.
        self.assertEqual(health(self.main), SERVING, "the main server")
        self.assertEqual(health(self.life), SERVING, "the lifecycle server")
        main_healthy = harness.metric_values(self.main.metrics(), "performer_engine_healthy")
        self.assertTrue(main_healthy and all(v == 1 for v in main_healthy), main_healthy)


if __name__ == "__main__":
    unittest.main()
