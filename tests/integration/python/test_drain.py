"""SIGTERM drains the server: health turns NOT_SERVING at once, new requests
get UNAVAILABLE, the streams already running finish normally, and the
process then exits with code 0."""

import signal
import threading
import time
import unittest

import grpc

import harness
from harness import pb
from grpc_health.v1 import health_pb2, health_pb2_grpc

MODEL = "lm_causal_default"
SERVICE = "performer.v1.Generation"
STEP_MS = 100
NEW_TOKENS = 30     # about 3 s per stream at 100 ms a step
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVING = health_pb2.HealthCheckResponse.SERVING


class DrainTest(unittest.TestCase):

    def setUp(self):
        harness.require_cases(MODEL)
        self.io = harness.load_safetensors(harness.fixture_dir(MODEL) + "/io.safetensors")
        self.server = self.start_server("30s")

    def start_server(self, drain_timeout):
        repo = harness.ModelRepository("drain")
        repo.add(MODEL)
        server = harness.Server(repo.dir, ["--max_batch=8", "--step_delay_ms=%d" % STEP_MS,
                                           "--drain_timeout=%s" % drain_timeout], name="drain")
        server.start()
        self.addCleanup(server.stop)
        return server

    def health(self, service=""):
        stub = health_pb2_grpc.HealthStub(self.server.channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status

    def test_sigterm_drains(self):
        server = self.server
        stub = server.stub
        self.assertEqual(self.health(), SERVING)
        prompt = self.io["prompt"].values
        greedy = self.io["greedy_tokens"].values

        prompts = [prompt, [1, 2, 3], [7] * 5]
        started = [threading.Event() for _ in prompts]
        results = [None] * len(prompts)

        def run(i):
            req = harness.request(MODEL, prompts[i], max_new_tokens=NEW_TOKENS, temperature=0.0,
                                  request_id="drain-%d" % i)
            results[i] = harness.collect_stream(
                stub, req, timeout=120, on_message=lambda c, j, m: started[i].set())
            started[i].set()

        threads = [threading.Thread(target=run, args=(i,), daemon=True)
                   for i in range(len(prompts))]
        for t in threads:
            t.start()
        for e in started:
            self.assertTrue(e.wait(30), "a stream never started")

        sigterm_at = time.monotonic()
        server.signal(signal.SIGTERM)

        # Health turns NOT_SERVING at once, for every readiness name.
        status = None
        while time.monotonic() - sigterm_at < 2.0:
            status = self.health()
            if status == NOT_SERVING:
                break
            time.sleep(0.02)
        self.assertEqual(status, NOT_SERVING, "health did not turn NOT_SERVING within 2 s")
        self.assertEqual(self.health(SERVICE), NOT_SERVING)
        self.assertEqual(self.health("%s/%s" % (SERVICE, MODEL)), NOT_SERVING)
        # Liveness is not readiness: a draining server is alive (a probe
        # must not restart it mid-drain).
        self.assertEqual(self.health("liveness"), SERVING)

        # New requests are refused while the old ones still run.
        response, code, details, _ = harness.unary(
            stub, harness.request(MODEL, [1, 2], max_new_tokens=2))
        self.assertEqual(code, grpc.StatusCode.UNAVAILABLE, details)
        stream = harness.collect_stream(stub, harness.request(MODEL, [1, 2], max_new_tokens=2))
        self.assertEqual(stream.code, grpc.StatusCode.UNAVAILABLE, stream)
        self.assertFalse(stream.messages)
        refused_at = time.monotonic() - sigterm_at
        self.assertTrue(server.running(), "the server exited before its streams finished")
        running = [r is None for r in results]
        self.assertTrue(any(running), "streams ended before the drain checks (%.2f s)"
                        % refused_at)

        for t in threads:
            t.join(60)
        for i, result in enumerate(results):
            with self.subTest(stream=i):
                self.assertIsNotNone(result)
                self.assertEqual(result.code, grpc.StatusCode.OK, result)
                self.assertEqual(len(result.tokens), NEW_TOKENS)
                self.assertEqual(result.last.finish_reason, pb.FINISH_REASON_LENGTH)
        self.assertEqual(results[0].tokens[:len(greedy)], greedy,
                         "the drained stream still decodes the fixture's greedy tokens")

        code = server.wait(timeout=40)
        self.assertEqual(code, 0, "exit code after SIGTERM\n%s" % server.log_tail(30))

    def test_drain_timeout_ends_remaining_streams(self):
        self.server.stop()
        server = self.start_server("1s")
        first = threading.Event()
        holder = {}

        def run():
            req = harness.request(MODEL, [1, 2, 3], max_new_tokens=40, temperature=0.0)
            holder["result"] = harness.collect_stream(
                server.stub, req, timeout=120, on_message=lambda c, j, m: first.set())
            first.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.assertTrue(first.wait(30), "the stream never started")
        start = time.monotonic()
        server.signal(signal.SIGTERM)
        thread.join(30)
        ended = time.monotonic() - start
        result = holder.get("result")
        self.assertIsNotNone(result)
        # 40 steps of 100 ms do not fit in the 1 s drain: the rest is cut.
        self.assertEqual(result.code, grpc.StatusCode.UNAVAILABLE, result)
        self.assertLess(len(result.tokens), 40)
        self.assertLess(ended, 3.5, "the stream outlived --drain_timeout=1s by far")
        code = server.wait(timeout=30)
        self.assertEqual(code, 0, server.log_tail(30))

    def test_sigterm_when_idle_exits_promptly(self):
        start = time.monotonic()
        self.server.signal(signal.SIGTERM)
        code = self.server.wait(timeout=40)
        self.assertEqual(code, 0, self.server.log_tail(30))
        self.assertLess(time.monotonic() - start, 10.0, "an idle server should stop at once")


if __name__ == "__main__":
    unittest.main()
