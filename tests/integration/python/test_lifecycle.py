"""Request lifecycle: client cancel, the Cancel RPC, deadlines, duplicate
request ids and overload (RESOURCE_EXHAUSTED with a retry hint). The servers
run with --step_delay_ms so that requests are still running when the test
acts on them; afterwards GetModel must show every slot free again."""

import threading
import time
import unittest
import uuid

import grpc

import harness
from harness import pb

MODEL = "lm_causal_default"
PROMPT = [5, 17, 42, 8]
LONG = 40  # 4 + 40 <= 48 (max_seq_len); with 100 ms steps: about 4 s


def _require_model():
    harness.require_cases(MODEL)


def long_request(request_id=None, **fields):
    fields.setdefault("max_new_tokens", LONG)
    return harness.request(MODEL, PROMPT, request_id=request_id or uuid.uuid4().hex,
                           temperature=0.0, **fields)


class StreamInBackground:
    """Runs a GenerateStream in a thread; first_message is set once one
    message arrived."""

    def __init__(self, stub, req, timeout=60):
        self.first_message = threading.Event()
        self.first_at = None  # time.monotonic() of the first message
        self.calls = []
        self.result = None
        self.thread = threading.Thread(target=self._run, args=(stub, req, timeout), daemon=True)
        self.thread.start()

    def _run(self, stub, req, timeout):
        def on_message(call, i, msg):
            if self.first_at is None:
                self.first_at = time.monotonic()
            self.first_message.set()
        self.result = harness.collect_stream(stub, req, timeout=timeout, on_message=on_message,
                                             call_holder=self.calls)
        self.first_message.set()

    def join(self, timeout=60):
        self.thread.join(timeout)
        return self.result


class CancelAndDeadlineTest(harness.ServerTestCase):
    NAME = "lifecycle"
    FLAGS = ("--max_batch=4", "--step_delay_ms=100")

    @classmethod
    def models(cls, repo):
        _require_model()
        repo.add(MODEL)

    def setUp(self):
        ok, info, _ = self.server.wait_model_idle(MODEL, timeout=10)
        self.assertTrue(ok, "model busy before the test: %s" % info)

    def assertFreedWithin(self, seconds):
        ok, info, waited = self.server.wait_model_idle(MODEL, timeout=seconds)
        self.assertTrue(ok, "slot not freed within %.1f s: active=%d queued=%d"
                        % (seconds, info.active_sequences, info.queued_requests))

    def test_client_cancel_frees_the_slot(self):
        req = long_request()
        call = self.stub.GenerateStream(req, timeout=60)
        first = next(call)
        self.assertTrue(first.token_ids)
        # GetModel may lag by one engine step.
        holding = self.server.wait_model(MODEL, lambda m: m.active_sequences == 1, timeout=1.0)
        self.assertIsNotNone(holding, "the running request holds a slot: %s"
                             % self.server.model_info(MODEL))
        call.cancel()
        with self.assertRaises(grpc.RpcError) as ctx:
            for _ in call:
                pass
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.CANCELLED)
        self.assertFreedWithin(2.0)
        # The request id is free again, and the server still serves.
        response, code, details, _ = harness.unary(self.stub, long_request(
            req.request_id, max_new_tokens=2))
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertEqual(len(response.token_ids), 2)

    def test_cancel_rpc(self):
        request_id = "cancel-rpc-" + uuid.uuid4().hex
        stream = StreamInBackground(self.stub, long_request(request_id))
        self.assertTrue(stream.first_message.wait(30), "no first message")
        response = self.stub.Cancel(pb.CancelRequest(request_id=request_id), timeout=10)
        self.assertTrue(response.cancelled, "Cancel of a running request")
        result = stream.join(30)
        self.assertIsNotNone(result, "stream did not end after Cancel")
        self.assertEqual(result.code, grpc.StatusCode.OK, result)
        self.assertTrue(result.messages, result)
        self.assertEqual(result.last.finish_reason, pb.FINISH_REASON_CANCELLED,
                         "last message: %s" % result.last)
        self.assertLess(len(result.tokens), LONG)
        self.assertEqual(result.last.usage.generated_tokens, len(result.tokens))

    def test_cancelled_id_is_free_at_once(self):
        request_id = "cancel-reuse-" + uuid.uuid4().hex
        stream = StreamInBackground(self.stub, long_request(request_id))
        self.assertTrue(stream.first_message.wait(30), "no first message")
        self.assertTrue(self.stub.Cancel(pb.CancelRequest(request_id=request_id),
                                         timeout=10).cancelled)
        # No wait: the id may be reused as soon as Cancel has returned.
        response, code, details, _ = harness.unary(
            self.stub, long_request(request_id, max_new_tokens=2))
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertEqual(len(response.token_ids), 2)
        result = stream.join(30)
        self.assertEqual(result.last.finish_reason, pb.FINISH_REASON_CANCELLED)
        self.assertFreedWithin(2.0)
        self.assertFreedWithin(2.0)

        # Cancelling it again: no longer live.
        try:
            again = self.stub.Cancel(pb.CancelRequest(request_id=request_id), timeout=10)
            self.assertFalse(again.cancelled, "second Cancel of a finished request")
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())

    def test_cancel_rpc_unknown_id(self):
        try:
            response = self.stub.Cancel(pb.CancelRequest(request_id="no-such-request"),
                                        timeout=10)
            self.assertFalse(response.cancelled)
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())

    def test_cancel_rpc_on_unary_generate(self):
        request_id = "cancel-unary-" + uuid.uuid4().hex
        future = self.stub.Generate.future(long_request(request_id), timeout=60)
        running = self.server.wait_model(MODEL, lambda m: m.active_sequences == 1, timeout=10)
        self.assertIsNotNone(running, "unary request never got a slot")
        time.sleep(0.3)
        self.assertTrue(self.stub.Cancel(pb.CancelRequest(request_id=request_id),
                                         timeout=10).cancelled)
        # Cancel is a normal end: the reply holds what was generated so far.
        response = future.result(timeout=30)
        self.assertEqual(response.finish_reason, pb.FINISH_REASON_CANCELLED, response)
        self.assertLess(len(response.token_ids), LONG)
        self.assertEqual(response.usage.generated_tokens, len(response.token_ids))
        self.assertFreedWithin(2.0)

    def test_duplicate_request_id(self):
        request_id = "dup-" + uuid.uuid4().hex
        stream = StreamInBackground(self.stub, long_request(request_id))
        self.assertTrue(stream.first_message.wait(30))
        response, code, details, _ = harness.unary(self.stub, long_request(request_id))
        self.assertStatus(code, details, grpc.StatusCode.ALREADY_EXISTS, msg="unary")
        dup = harness.collect_stream(self.stub, long_request(request_id))
        self.assertStatus(dup.code, dup.details, grpc.StatusCode.ALREADY_EXISTS, msg="stream")
        self.assertFalse(dup.messages)
        # The first request is unaffected.
        self.assertTrue(self.stub.Cancel(pb.CancelRequest(request_id=request_id),
                                         timeout=10).cancelled)
        result = stream.join(30)
        self.assertEqual(result.code, grpc.StatusCode.OK, result)
        self.assertFreedWithin(2.0)

    def test_request_id_reusable_once_finished(self):
        # Once a request's stream (or unary call) has ended, its id is no
        # longer "running": reusing it at once must not give ALREADY_EXISTS.
        request_id = "reuse-" + uuid.uuid4().hex
        for i in range(3):
            result = harness.collect_stream(self.stub, long_request(request_id, max_new_tokens=2))
            self.assertEqual(result.code, grpc.StatusCode.OK,
                             "stream %d reusing a finished request_id: %r" % (i, result))
            response, code, details, _ = harness.unary(
                self.stub, long_request(request_id, max_new_tokens=2))
            self.assertEqual(code, grpc.StatusCode.OK,
                             "unary %d reusing a finished request_id: %s" % (i, details))

    def test_stream_deadline(self):
        start = time.monotonic()
        result = harness.collect_stream(self.stub, long_request(), timeout=0.8)
        elapsed = time.monotonic() - start
        self.assertEqual(result.code, grpc.StatusCode.DEADLINE_EXCEEDED, result)
        self.assertLess(elapsed, 3.0)
        self.assertLess(len(result.tokens), LONG)
        if result.messages and result.last.finish_reason:
            self.assertEqual(result.last.finish_reason, pb.FINISH_REASON_DEADLINE)
        self.assertFreedWithin(2.0)

    def test_unary_deadline(self):
        response, code, details, _ = harness.unary(self.stub, long_request(), timeout=0.8)
        self.assertEqual(code, grpc.StatusCode.DEADLINE_EXCEEDED, details)
        self.assertFreedWithin(2.0)

    def test_server_still_serves_after_cancels(self):
        response, code, details, _ = harness.unary(self.stub, long_request(max_new_tokens=3))
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertEqual(len(response.token_ids), 3)
        self.assertEqual(response.finish_reason, pb.FINISH_REASON_LENGTH)


class OverloadTest(harness.ServerTestCase):
    NAME = "overload"
    FLAGS = ("--max_batch=1", "--max_queue=1", "--step_delay_ms=100")

    @classmethod
    def models(cls, repo):
        _require_model()
        repo.add(MODEL)

    def test_slot_and_queue_full(self):
        info = self.server.model_info(MODEL)
        self.assertEqual(info.max_sequences, 1)

        first = StreamInBackground(self.stub, long_request("slot-holder"))
        self.assertTrue(first.first_message.wait(30), "first request never ran")
        second = StreamInBackground(self.stub, long_request("queued"))
        queued = self.server.wait_model(
            MODEL, lambda m: m.active_sequences == 1 and m.queued_requests == 1, timeout=10)
        self.assertIsNotNone(queued, "second request not queued: %s"
                             % self.server.model_info(MODEL))
        self.assertFalse(second.first_message.is_set(), "queued request produced tokens")

        # Slot and queue are full: the third is refused at once, unary and stream.
        start = time.monotonic()
        response, code, details, trailing = harness.unary(self.stub, long_request("third"))
        elapsed = time.monotonic() - start
        self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, details)
        self.assertLess(elapsed, 1.0, "RESOURCE_EXHAUSTED should come without waiting")
        pushback = harness.metadata_value(trailing, "grpc-retry-pushback-ms")
        self.assertIsNotNone(pushback, "no grpc-retry-pushback-ms in %r" % (trailing,))
        self.assertTrue(str(pushback).isdigit(), "pushback %r is not a decimal number"
                        % (pushback,))
        self.assertGreaterEqual(int(pushback), 0)

        third = harness.collect_stream(self.stub, long_request("third-stream"))
        self.assertEqual(third.code, grpc.StatusCode.RESOURCE_EXHAUSTED, third)
        self.assertFalse(third.messages)
        self.assertIsNotNone(
            harness.metadata_value(third.trailing_metadata, "grpc-retry-pushback-ms"),
            "stream: no grpc-retry-pushback-ms in %r" % (third.trailing_metadata,))

        # Cancel the queued one (it never ran), then the running one.
        self.assertTrue(self.stub.Cancel(pb.CancelRequest(request_id="queued"),
                                         timeout=10).cancelled)
        result = second.join(30)
        self.assertEqual(result.code, grpc.StatusCode.OK, result)
        self.assertEqual(result.tokens, [], "the queued request never ran")
        if result.messages:
            self.assertEqual(result.last.finish_reason, pb.FINISH_REASON_CANCELLED)
        self.assertTrue(self.stub.Cancel(pb.CancelRequest(request_id="slot-holder"),
                                         timeout=10).cancelled)
        result = first.join(30)
        self.assertEqual(result.code, grpc.StatusCode.OK, result)
        ok, info, _ = self.server.wait_model_idle(MODEL, timeout=2.0)
        self.assertTrue(ok, "slot not freed: %s" % info)

        # Capacity is back.
        response, code, details, _ = harness.unary(self.stub, long_request(max_new_tokens=2))
        self.assertEqual(code, grpc.StatusCode.OK, details)

    def test_queued_request_runs_when_the_slot_frees(self):
        first = StreamInBackground(self.stub, long_request("runner", max_new_tokens=8))
        self.assertTrue(first.first_message.wait(30))
        second = StreamInBackground(self.stub, long_request("waiter", max_new_tokens=5))
        r1 = first.join(60)
        r2 = second.join(60)
        self.assertEqual(r1.code, grpc.StatusCode.OK, r1)
        self.assertEqual(r2.code, grpc.StatusCode.OK, r2)
        self.assertEqual(len(r2.tokens), 5)
        self.assertGreater(r2.last.timings.queue_seconds, 0.0,
                           "the second request waited for the slot")
        # Same prompt, greedy: the shorter run is a prefix of the longer one.
        self.assertEqual(r2.tokens, r1.tokens[:5])


class PriorityTest(harness.ServerTestCase):
    NAME = "priority"
    # Priorities above 0 need the "priority" token permission unless the
    # bound is raised (test_security covers the permission).
    FLAGS = ("--max_batch=1", "--max_queue=4", "--step_delay_ms=50",
             "--max_priority_unprivileged=5")

    @classmethod
    def models(cls, repo):
        _require_model()
        repo.add(MODEL)

    def test_higher_priority_is_admitted_first(self):
        holder = StreamInBackground(self.stub, long_request("holder", max_new_tokens=10))
        self.assertTrue(holder.first_message.wait(30))
        waiting = []
        for i, (name, priority) in enumerate((("low-a", 0), ("low-b", 0), ("high", 5))):
            waiting.append(StreamInBackground(
                self.stub, long_request(name, max_new_tokens=3, priority=priority)))
            self.assertIsNotNone(
                self.server.wait_model(MODEL, lambda m, n=i + 1: m.queued_requests == n,
                                       timeout=10),
                "%s not queued: %s" % (name, self.server.model_info(MODEL)))
        results = [w.join(60) for w in [holder] + waiting]
        for r in results:
            self.assertEqual(r.code, grpc.StatusCode.OK, r)
        low_a, low_b, high = waiting
        self.assertLess(high.first_at, low_a.first_at, "priority 5 runs before priority 0")
        self.assertLess(low_a.first_at, low_b.first_at, "FIFO among equal priorities")


if __name__ == "__main__":
    unittest.main()
