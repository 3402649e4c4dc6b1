"""Hostile but fair input to the real server, each a regression test: a
request that does not parse (alone, or on a ModelStreamInfer stream), an
out-of-range --max_message_bytes,
half-open connections to /metrics, and the accuracy of the retry hint a
refused request gets."""

import os
import socket
import subprocess
import threading
import time
import unittest

import grpc

import harness
import http2_attacks
from harness import pb
from inference import grpc_service_pb2 as kserve

DECODER = "lm_causal_default"      # vocab 100, max_seq_len 48, no tokenizer
ENCODER = "lm_bidir_padmask"       # bidirectional: Embed only
# A GenerateRequest whose field 2 (model, a string) holds bytes that are not
# UTF-8: it does not parse as the message type.
UNPARSABLE = bytes([0x12, 0x02, 0xFF, 0xFE])
# The same for a ModelInferRequest: field 1 (model_name).
UNPARSABLE_INFER = bytes([0x0A, 0x02, 0xFF, 0xFE])


class UnparsableRequestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        repo = harness.ModelRepository("hostile")
        repo.add_required(DECODER, ENCODER)
        cls.server = harness.MetricsServer(repo.dir, (f"--default_model={DECODER}",
                                                      "--max_prompt_bytes=64"),
                                           name="hostile").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def raw_call(self, method, streaming):
        path = "/performer.v1.Generation/" + method
        if streaming:
            call = self.server.channel.unary_stream(path, request_serializer=None,
                                                    response_deserializer=None)
            try:
                list(call(UNPARSABLE, timeout=30))
            except grpc.RpcError as e:
                return e.code(), e.details()
            return grpc.StatusCode.OK, ""
        call = self.server.channel.unary_unary(path, request_serializer=None,
                                               response_deserializer=None)
        try:
            call(UNPARSABLE, timeout=30)
        except grpc.RpcError as e:
            return e.code(), e.details()
        return grpc.StatusCode.OK, ""

    def test_a_call_reset_before_its_message_is_cancelled_not_unparsable(self):
        # HEADERS, then RST_STREAM CANCEL before any message.
        self.assertEqual(http2_attacks.reset_flood("127.0.0.1", self.server.port, 1), 1)
        deadline = time.monotonic() + 10
        while True:
            samples = self.server.metrics()
            cancelled = sum(harness.metric_values(samples, "performer_requests_total",
                                                  method="Generate", code="CANCELLED"))
            if cancelled >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(cancelled, 1.0, self.server.log_tail())
        self.assertEqual(sum(harness.metric_values(samples, "performer_requests_total",
                                                   method="Generate", code="INVALID_ARGUMENT")),
                         0.0)
        self.assertIn("cancelled the call before its request arrived", self.server.log())

    def test_unparsable_request_is_invalid_argument_logged_and_counted(self):
        for method, streaming in (("Generate", False), ("GenerateStream", True)):
            code, details = self.raw_call(method, streaming)
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
            self.assertIn("UTF-8", details)
            self.assertIn(method, details)
        samples = self.server.metrics()
        for method in ("Generate", "GenerateStream"):
            # No model: the request did not get as far as naming one.
            counted = harness.metric_values(samples, "performer_requests_total", method=method,
                                            code="INVALID_ARGUMENT", model="")
            self.assertEqual(sum(counted), 1.0, "%s: %s" % (method, counted))
        log = self.server.log()
        self.assertIn("does not parse", log)
        # The server goes on serving.
        response = self.server.stub.Generate(harness.request(DECODER, [1, 2], max_new_tokens=2),
                                             timeout=30)
        self.assertEqual(len(response.token_ids), 2)

    def test_unparsable_stream_request_ends_the_stream_logged_and_counted(self):
        # gRPC reports a stream message that does not parse as the client's
        # half-close; the stream must not end OK with the later requests
        # silently dropped.
        def infer_request(request_id):
            request = kserve.ModelInferRequest(model_name=DECODER, id=request_id)
            ids = request.inputs.add(name="input_ids", datatype="INT32", shape=[2])
            ids.contents.int_contents.extend([1, 2])
            request.parameters["max_tokens"].int64_param = 2
            return request.SerializeToString()

        call = self.server.channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer", request_serializer=None,
            response_deserializer=None)
        responses = []
        with self.assertRaises(grpc.RpcError) as ended:
            for raw in call(iter([infer_request("before"), UNPARSABLE_INFER,
                                  infer_request("after")]), timeout=30):
                responses.append(kserve.ModelStreamInferResponse.FromString(raw))
        code, details = ended.exception.code(), ended.exception.details()
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
        self.assertIn("request 2 of the ModelStreamInfer stream does not parse", details)
        self.assertIn("UTF-8", details)
        # The request before it was answered to its end; none after it.
        self.assertTrue(responses, "no response to the request before the unparsable one")
        self.assertEqual([r.error_message for r in responses if r.error_message], [])
        self.assertEqual({r.infer_response.id for r in responses}, {"before"})
        self.assertTrue(
            responses[-1].infer_response.parameters["triton_final_response"].bool_param)
        deadline = time.monotonic() + 10
        while True:
            counted = harness.metric_values(self.server.metrics(), "performer_requests_total",
                                            method="ModelStreamInfer", protocol="kserve_v2",
                                            code="INVALID_ARGUMENT", model="")
            if sum(counted) >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(sum(counted), 1.0, counted)
        self.assertIn("request 2 of the ModelStreamInfer stream does not parse", self.server.log())

    def test_text_is_bounded_before_tokenizing(self):
        long_text = "x" * 65
        for call in (lambda: self.server.stub.Generate(
                         pb.GenerateRequest(model=DECODER, prompt_text=long_text), timeout=30),
                     lambda: self.server.stub.Embed(
                         pb.EmbedRequest(model=ENCODER, text=long_text), timeout=30)):
            with self.assertRaises(grpc.RpcError) as refused:
                call()
            self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("65 bytes", refused.exception.details())
            self.assertIn("at most 64", refused.exception.details())

    def test_half_open_connections_do_not_block_scrapes(self):
        # Connections that never send a request: each holds a worker of the
        # metrics endpoint until its request timeout.
        # 64 of them (twice the endpoint's threads) delay a scrape by about
        # two request timeouts, well inside Prometheus's 10 s.
        idle = [socket.create_connection(("127.0.0.1", self.server.metrics_port), timeout=5)
                for _ in range(64)]
        try:
            start = time.monotonic()
            text = self.server.metrics_text(timeout=10)
            self.assertIn("performer_model_info", text)
            self.assertLess(time.monotonic() - start, 5)
        finally:
            for s in idle:
                s.close()


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class StartupFlagTest(unittest.TestCase):
    def test_an_ipv6_metrics_host_is_served_or_refused_clearly(self):
        repo = harness.ModelRepository("metrics_v6")
        repo.add_required(DECODER)
        for host in ("::1", "[::1]"):
            server = harness.MetricsServer(repo.dir, ("--metrics_host=" + host,), name="v6")
            try:
                server.start()
            except harness.ServerError as e:
                # Debian's civetweb has no IPv6: the start says so.
                self.assertIn("was built without IPv6", str(e))
                continue
            try:
                self.assertTrue(ipv6_loopback())
                status, body = harness.http_get("http://[::1]:%d/metrics" % server.metrics_port)
                self.assertEqual(status, 200, body[:300])
                self.assertIn("performer_model_info", body)
            finally:
                server.stop()

    def test_max_message_bytes_beyond_32_bits_is_refused_at_start(self):
        repo = harness.ModelRepository("message_bytes")
        repo.add_required(DECODER)
        for value in ("4294967296", "0"):
            proc = subprocess.run(
                [harness.server_binary(), "--model_repository=%s" % repo.dir, "--port=0",
                 "--host=127.0.0.1", "--metrics_port=-1", "--max_message_bytes=%s" % value],
                stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
            output = (proc.stdout + proc.stderr).decode(errors="replace")
            self.assertEqual(proc.returncode, 2, output)
            self.assertIn("--max_message_bytes", output)


    def test_a_peer_token_that_is_no_header_value_is_refused_at_start(self):
        # The token is sent as a header value, and gRPC aborts the process on
        # one it refuses: the file is read as a token file (comments, one
        # token of token characters), and anything else stops the start.
        repo = harness.ModelRepository("peer_token")
        repo.add_required(DECODER)
        token_file = os.path.join(repo.dir, "..", "peer-token")
        with open(token_file, "wb") as f:
            f.write(b"# the token presented to peers\npeer-token-\x01-0123456789abcdef\n")
        proc = subprocess.run(
            [harness.server_binary(), "--model_repository=%s" % repo.dir, "--port=0",
             "--host=127.0.0.1", "--metrics_port=-1", "--session_peers=127.0.0.1:1",
             "--session_peer_token_file=%s" % token_file],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        output = (proc.stdout + proc.stderr).decode(errors="replace")
        self.assertEqual(proc.returncode, 2, output)
        self.assertIn("--session_peer_token_file: ", output)
        self.assertIn("the token has a character outside letters, digits", output)

class RetryHintTest(unittest.TestCase):
    """One slot, no queue, steps slowed to a known pace: a refused request's
    grpc-retry-pushback-ms is close to the time until a retry succeeds."""

    @classmethod
    def setUpClass(cls):
        repo = harness.ModelRepository("retry_hint")
        repo.add_required(DECODER)
        cls.server = harness.Server(repo.dir, (f"--default_model={DECODER}", "--max_batch=1",
                                               "--max_queue=0", "--step_delay_ms=40"),
                                    name="retry_hint").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def long_request(self):
        return harness.request(DECODER, [1, 2, 3], max_new_tokens=30, ignore_eos=True)

    def test_retry_hint_matches_the_real_wait(self):
        stub = self.server.stub
        # Requests served to their end time the service.
        for _ in range(3):
            stub.Generate(self.long_request(), timeout=60)
        # The long one holds the only slot once its first token arrives; a
        # probe sent before that could take the slot and refuse it instead.
        long_stream = stub.GenerateStream(self.long_request(), timeout=60)
        next(long_stream)
        runner = threading.Thread(target=lambda: list(long_stream))
        runner.start()
        try:
            with self.assertRaises(grpc.RpcError, msg="a request was admitted while the "
                                   "only slot was busy") as refused:
                stub.Generate(harness.request(DECODER, [1], max_new_tokens=1), timeout=30)
            refused_at = time.monotonic()
            self.assertEqual(refused.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED,
                             refused.exception.details())
            trailing = dict(refused.exception.trailing_metadata() or ())
            hint_ms = int(trailing["grpc-retry-pushback-ms"])
            # Retry until one is admitted: the real wait.
            while True:
                try:
                    stub.Generate(harness.request(DECODER, [1], max_new_tokens=1), timeout=30)
                    break
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
                    self.assertLess(time.monotonic() - refused_at, 30)
                    time.sleep(0.02)
            waited_ms = (time.monotonic() - refused_at) * 1000
        finally:
            runner.join(60)
        # The hint is the whole service time of one request (one slot); the
        # refusal came shortly after the running one started, so the real
        # wait is most of it.
        # (A hint that counted the queue and the wait twice was 4-5x the
        # real wait.)
        self.assertLess(hint_ms, 2.5 * waited_ms + 200, "hint %d ms, waited %.0f ms"
                        % (hint_ms, waited_ms))
        self.assertGreater(hint_ms, 0.25 * waited_ms, "hint %d ms, waited %.0f ms"
                           % (hint_ms, waited_ms))


if __name__ == "__main__":
    unittest.main()
