"""The Open Inference Protocol (KServe v2 / Triton gRPC) on the real binary.

A client generated from proto/inference/grpc_service.proto (the protocol's
own service and messages, nothing of performer.v1) talks to performer-serve
serving the repository's models/ on the same port as performer.v1: the
server is live and ready, the model's metadata lists BYTES text_input /
text_output, ModelInfer generates with max_tokens as a request parameter
and echoes the id (prompt in contents or in raw_input_contents),
ModelStreamInfer streams pieces that add up to the unary text, an unknown
model is NOT_FOUND, a bad parameter INVALID_ARGUMENT, overload
RESOURCE_EXHAUSTED, a cancelled stream frees its slot, and the metrics count
these requests under protocol="kserve_v2". Every call has a deadline.
"""

import os
import struct
import threading
import time
import unittest

import grpc

import harness
from harness import pb
from inference import grpc_service_pb2 as kserve
from inference import grpc_service_pb2_grpc as kserve_grpc

MODEL = "performer-fortunes"
PROMPT = "The meaning of life is"
MAX_TOKENS = 10
TIMEOUT_S = 60


def raw_bytes(element):
    """A BYTES element as raw contents carry it: 4-byte little-endian length,
    then the bytes."""
    return struct.pack("<I", len(element)) + element


def text_request(prompt, request_id, max_tokens=MAX_TOKENS, raw=False, model=MODEL):
    request = kserve.ModelInferRequest(model_name=model, id=request_id)
    tensor = request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    if raw:
        request.raw_input_contents.append(raw_bytes(prompt.encode("utf-8")))
    else:
        tensor.contents.bytes_contents.append(prompt.encode("utf-8"))
    request.parameters["max_tokens"].int64_param = max_tokens
    request.parameters["temperature"].double_param = 0.0
    return request


def output(response, name):
    for index, tensor in enumerate(response.outputs):
        if tensor.name == name:
            return index, tensor
    raise AssertionError("no output %s in %s" % (name, response))


def text_output(response):
    index, tensor = output(response, "text_output")
    if response.raw_output_contents:
        raw = response.raw_output_contents[index]
        (length,) = struct.unpack("<I", raw[:4])
        assert len(raw) == 4 + length, "raw BYTES element of the wrong length"
        return raw[4:].decode("utf-8")
    assert len(tensor.contents.bytes_contents) == 1, tensor
    return tensor.contents.bytes_contents[0].decode("utf-8")


def output_ids(response):
    _, tensor = output(response, "output_ids")
    return list(tensor.contents.int_contents)


class KServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        models = os.path.join(harness.REPO, "models")
        if not os.path.isdir(os.path.join(models, MODEL)):
            raise AssertionError("%s is missing" % os.path.join(models, MODEL))
        # --step_delay_ms: a stream's pieces come one by one rather than
        # merged for a reader that lags behind.
        cls.server = harness.MetricsServer(models, ("--max_batch=4", "--step_delay_ms=5"),
                                           name="kserve")
        try:
            cls.server.start()
        except Exception:
            cls.server.kill()
            raise
        cls.stub = kserve_grpc.GRPCInferenceServiceStub(cls.server.channel)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def expect_error(self, call, request, code, *words):
        with self.assertRaises(grpc.RpcError) as raised:
            call(request, timeout=TIMEOUT_S)
        self.assertEqual(raised.exception.code(), code, raised.exception.details())
        for word in words:
            self.assertIn(word, raised.exception.details())

    def generate_text(self, prompt):
        """What performer.v1 Generate gives for the same prompt, greedy."""
        response = self.server.stub.Generate(
            pb.GenerateRequest(model=MODEL, prompt_text=prompt, max_new_tokens=MAX_TOKENS,
                               temperature=0.0), timeout=TIMEOUT_S)
        return response.text, list(response.token_ids)

    def test_live_and_ready(self):
        self.assertTrue(self.stub.ServerLive(kserve.ServerLiveRequest(), timeout=10).live)
        self.assertTrue(self.stub.ServerReady(kserve.ServerReadyRequest(), timeout=10).ready)
        self.assertTrue(self.stub.ModelReady(kserve.ModelReadyRequest(name=MODEL),
                                             timeout=10).ready)
        metadata = self.stub.ServerMetadata(kserve.ServerMetadataRequest(), timeout=10)
        self.assertEqual(metadata.name, "performer-serve")

    def test_model_metadata(self):
        metadata = self.stub.ModelMetadata(kserve.ModelMetadataRequest(name=MODEL), timeout=10)
        self.assertEqual(metadata.name, MODEL)
        inputs = {t.name: (t.datatype, list(t.shape)) for t in metadata.inputs}
        outputs = {t.name: (t.datatype, list(t.shape)) for t in metadata.outputs}
        self.assertEqual(inputs["text_input"], ("BYTES", [1]))
        self.assertEqual(inputs["input_ids"], ("INT32", [-1]))
        self.assertEqual(outputs["text_output"], ("BYTES", [1]))
        self.assertEqual(outputs["output_ids"], ("INT32", [-1]))

    def test_model_infer_generates_with_max_tokens_and_echoes_the_id(self):
        expected_text, expected_ids = self.generate_text(PROMPT)
        for raw in (False, True):
            with self.subTest(raw=raw):
                request_id = "kserve-%s" % ("raw" if raw else "contents")
                response = self.stub.ModelInfer(text_request(PROMPT, request_id, raw=raw),
                                                timeout=TIMEOUT_S)
                self.assertEqual(response.id, request_id)
                self.assertEqual(response.model_name, MODEL)
                self.assertEqual(bool(response.raw_output_contents), raw)
                self.assertEqual(text_output(response), expected_text)
                if not raw:
                    self.assertEqual(output_ids(response), expected_ids)
                self.assertEqual(len(expected_ids), MAX_TOKENS)
                self.assertEqual(response.parameters["generated_tokens"].int64_param, MAX_TOKENS)
                self.assertEqual(response.parameters["finish_reason"].string_param, "length")
        short = self.stub.ModelInfer(text_request(PROMPT, "short", max_tokens=3),
                                     timeout=TIMEOUT_S)
        self.assertEqual(output_ids(short), expected_ids[:3])

    def test_session_id_continues_a_performer_session(self):
        # A turn over the Open Inference Protocol and the next one over
        # performer.v1 are one session.
        first = text_request(PROMPT, "kserve-turn-1", max_tokens=3)
        first.parameters["session_id"].string_param = "kserve-chat"
        first.parameters["create_session"].bool_param = True
        self.stub.ModelInfer(first, timeout=TIMEOUT_S)
        state = self.server.stub.ExportSession(
            pb.ExportSessionRequest(model=MODEL, session_id="kserve-chat"), timeout=TIMEOUT_S)
        self.assertEqual(state.tokens, len(PROMPT.encode("utf-8")) + 3)
        second = text_request("and then", "kserve-turn-2", max_tokens=2)
        second.parameters["session_id"].string_param = "kserve-chat"
        response = self.stub.ModelInfer(second, timeout=TIMEOUT_S)
        seen = len(PROMPT.encode("utf-8")) + 3
        self.assertEqual(response.parameters["prompt_tokens"].int64_param, seen + len("and then"))
        self.assertEqual(response.parameters["session_position"].int64_param,
                         seen + len("and then") + 2)
        state = self.server.stub.ExportSession(
            pb.ExportSessionRequest(model=MODEL, session_id="kserve-chat"), timeout=TIMEOUT_S)
        self.assertEqual(state.tokens, len(PROMPT.encode("utf-8")) + 3 + len("and then") + 2)

    def test_model_stream_infer_streams_the_unary_text(self):
        unary = self.stub.ModelInfer(text_request(PROMPT, "unary"), timeout=TIMEOUT_S)
        requests = [text_request(PROMPT, "stream-a"), text_request(PROMPT, "stream-b")]
        # As Triton's streaming clients send it.
        requests[1].parameters["triton_enable_empty_final_response"].bool_param = True
        pieces = {"stream-a": [], "stream-b": []}
        finals = {}
        for response in self.stub.ModelStreamInfer(iter(requests), timeout=TIMEOUT_S):
            self.assertEqual(response.error_message, "")
            infer = response.infer_response
            pieces[infer.id].append(text_output(infer))
            if infer.parameters["triton_final_response"].bool_param:
                self.assertNotIn(infer.id, finals, "two final responses")
                finals[infer.id] = infer.parameters["finish_reason"].string_param
        self.assertEqual(finals, {"stream-a": "length", "stream-b": "length"})
        for request_id, texts in pieces.items():
            self.assertGreater(len(texts), 1, "%s: one response per piece" % request_id)
            self.assertEqual("".join(texts), text_output(unary), request_id)

    def test_stream_errors_are_responses(self):
        requests = [text_request(PROMPT, "lost", model="no-such-model"),
                    text_request(PROMPT, "fine", max_tokens=2)]
        responses = list(self.stub.ModelStreamInfer(iter(requests), timeout=TIMEOUT_S))
        errors = [r for r in responses if r.error_message]
        self.assertEqual(len(errors), 1, responses)
        self.assertEqual(errors[0].infer_response.id, "lost")
        self.assertTrue(errors[0].error_message.startswith("NOT_FOUND: "), errors[0])
        fine = [r.infer_response for r in responses if not r.error_message]
        self.assertTrue(fine and fine[-1].parameters["triton_final_response"].bool_param)

    def test_unknown_model_is_not_found(self):
        self.expect_error(self.stub.ModelInfer, text_request(PROMPT, "x", model="no-such-model"),
                          grpc.StatusCode.NOT_FOUND, "no-such-model")
        self.expect_error(self.stub.ModelMetadata, kserve.ModelMetadataRequest(name="nope"),
                          grpc.StatusCode.NOT_FOUND, "nope")
        self.expect_error(self.stub.ModelReady, kserve.ModelReadyRequest(name="nope"),
                          grpc.StatusCode.NOT_FOUND, "nope")

    def test_bad_parameters_are_invalid_arguments(self):
        request = text_request(PROMPT, "bad")
        request.parameters["max_tokens"].string_param = "ten"
        self.expect_error(self.stub.ModelInfer, request, grpc.StatusCode.INVALID_ARGUMENT,
                          "max_tokens")
        request = text_request(PROMPT, "bad", max_tokens=0)
        request.parameters["max_tokens"].int64_param = -5
        self.expect_error(self.stub.ModelInfer, request, grpc.StatusCode.INVALID_ARGUMENT,
                          "max_tokens")
        request = text_request(PROMPT, "bad")
        request.parameters["top_p"].double_param = 1.5
        self.expect_error(self.stub.ModelInfer, request, grpc.StatusCode.INVALID_ARGUMENT,
                          "top_p")
        request = text_request(PROMPT, "bad")
        request.parameters["beam_width"].int64_param = 4
        self.expect_error(self.stub.ModelInfer, request, grpc.StatusCode.INVALID_ARGUMENT,
                          "beam_width")

    def test_requests_are_counted_by_protocol(self):
        before = self.server.metrics()
        self.stub.ModelInfer(text_request(PROMPT, "counted", max_tokens=2), timeout=TIMEOUT_S)
        self.server.stub.Generate(pb.GenerateRequest(model=MODEL, prompt_text=PROMPT,
                                                     max_new_tokens=2), timeout=TIMEOUT_S)

        def count(samples, method, protocol):
            return sum(harness.metric_values(samples, "performer_requests_total", model=MODEL,
                                             method=method, protocol=protocol, code="OK"))

        # The observers hear of a call's end just after its client does.
        deadline = time.monotonic() + 10
        while True:
            after = self.server.metrics()
            infer = count(after, "ModelInfer", "kserve_v2") - count(before, "ModelInfer",
                                                                    "kserve_v2")
            generate = count(after, "Generate", "performer") - count(before, "Generate",
                                                                     "performer")
            if (infer, generate) == (1, 1) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual((infer, generate), (1, 1))


class KServeOverloadTest(unittest.TestCase):
    """One slot, no queue: a second inference is RESOURCE_EXHAUSTED (with the
    retry hint on ModelInfer, as error_message on a stream), and cancelling
    the stream that holds the slot frees it."""

    @classmethod
    def setUpClass(cls):
        cls.server = harness.Server(os.path.join(harness.REPO, "models"),
                                    ("--max_batch=1", "--max_queue=0", "--step_delay_ms=20"),
                                    name="kserve-overload")
        try:
            cls.server.start()
        except Exception:
            cls.server.kill()
            raise
        cls.stub = kserve_grpc.GRPCInferenceServiceStub(cls.server.channel)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_overload_and_cancel(self):
        self.assertEqual(self.server.model_info(MODEL).max_sequences, 1)
        holder = self.stub.ModelStreamInfer(iter([text_request(PROMPT, "holder", max_tokens=500)]),
                                            timeout=TIMEOUT_S)
        first = threading.Event()
        seen = []

        def read():
            try:
                for response in holder:
                    seen.append(response)
                    first.set()
            except grpc.RpcError as error:
                seen.append(error)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        self.assertTrue(first.wait(30), "the slot holder produced nothing")

        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.ModelInfer(text_request(PROMPT, "refused"), timeout=TIMEOUT_S)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED,
                         raised.exception.details())
        pushback = harness.metadata_value(raised.exception.trailing_metadata(),
                                          "grpc-retry-pushback-ms")
        self.assertTrue(pushback is not None and str(pushback).isdigit(), pushback)

        refused = list(self.stub.ModelStreamInfer(iter([text_request(PROMPT, "refused-stream")]),
                                                  timeout=TIMEOUT_S))
        self.assertEqual(len(refused), 1, refused)
        self.assertTrue(refused[0].error_message.startswith("RESOURCE_EXHAUSTED: "), refused[0])
        self.assertEqual(refused[0].infer_response.id, "refused-stream")

        holder.cancel()
        reader.join(30)
        self.assertFalse(reader.is_alive(), "the cancelled stream did not end")
        self.assertIsInstance(seen[-1], grpc.RpcError)
        self.assertEqual(seen[-1].code(), grpc.StatusCode.CANCELLED)
        ok, info, _ = self.server.wait_model_idle(MODEL, timeout=5.0)
        self.assertTrue(ok, "slot not freed after the cancel: %s" % info)
        response = self.stub.ModelInfer(text_request(PROMPT, "after", max_tokens=2),
                                        timeout=TIMEOUT_S)
        self.assertEqual(response.id, "after")


if __name__ == "__main__":
    unittest.main()
