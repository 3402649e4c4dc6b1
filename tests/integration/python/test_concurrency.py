"""64 concurrent streams on one model give, bit for bit, the tokens each
request gives when it runs alone (continuous batching must not change a
request's output). Greedy and seeded-sampling requests are mixed, prompts
have different lengths, and some prompts are longer than the prefill chunk."""

import random
import threading
import unittest

import grpc

import harness

MODEL = "lm_causal_default"
N = 64


class ConcurrentStreamsTest(harness.ServerTestCase):
    NAME = "concurrency"
    # A small step delay keeps the requests overlapping; prefill chunks of 6
    # tokens put long prompts partly into the batched decode steps.
    FLAGS = ("--max_batch=64", "--max_queue=64", "--step_delay_ms=5",
             "--prefill_chunk_tokens=6")

    @classmethod
    def models(cls, repo):
        harness.require_cases(MODEL)
        repo.add(MODEL)
        config = harness.load_json(harness.fixture_dir(MODEL) + "/config.json")
        cls.vocab = config["num_tokens"]
        cls.max_len = config["max_seq_len"]

    def make_requests(self):
        rng = random.Random(20240611)
        requests, seen = [], set()
        while len(requests) < N:
            i = len(requests)
            length = rng.randint(1, 20)
            prompt = tuple(rng.randrange(self.vocab) for _ in range(length))
            if prompt in seen:
                continue
            seen.add(prompt)
            max_new = rng.randint(4, min(24, self.max_len - length))
            fields = dict(max_new_tokens=max_new, request_id="conc-%d" % i)
            if i % 4 == 3:
                fields.update(temperature=0.9, top_k=20, seed=1000 + i)
            elif i % 4 == 2:
                fields.update(temperature=0.0, return_logprobs=True)
            else:
                fields.update(temperature=0.0)
            requests.append(harness.request(MODEL, prompt, **fields))
        return requests

    def test_concurrent_streams_match_solo_runs(self):
        info = self.server.model_info(MODEL)
        self.assertEqual(info.max_sequences, 64, "--max_batch=64 with the default memory budget")
        requests = self.make_requests()

        solo = []
        for req in requests:
            result = harness.collect_stream(self.stub, req, timeout=120)
            self.assertStreamOk(result, "solo %s" % req.request_id)
            self.assertEqual(len(result.tokens), req.max_new_tokens)
            solo.append(result)

        peak = {"active": 0}
        stop = {"done": False}

        def poll():
            while not stop["done"]:
                try:
                    m = self.server.model_info(MODEL)
                    peak["active"] = max(peak["active"], m.active_sequences)
                except grpc.RpcError:
                    pass

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            concurrent = harness.run_in_threads(
                lambda req: harness.collect_stream(self.stub, req, timeout=240),
                [(req,) for req in requests])
        finally:
            stop["done"] = True
            poller.join(timeout=10)

        mismatches = []
        for req, alone, together in zip(requests, solo, concurrent):
            if isinstance(together, BaseException):
                mismatches.append("%s raised %r" % (req.request_id, together))
                continue
            if together.code != grpc.StatusCode.OK:
                mismatches.append("%s: %r" % (req.request_id, together))
                continue
            if together.tokens != alone.tokens:
                mismatches.append("%s: alone %s, concurrent %s"
                                  % (req.request_id, alone.tokens, together.tokens))
            if together.last.finish_reason != alone.last.finish_reason:
                mismatches.append("%s: finish %s vs %s" % (
                    req.request_id, harness.finish_name(alone.last.finish_reason),
                    harness.finish_name(together.last.finish_reason)))
            if req.return_logprobs:
                self.assertEqual(len(together.logprobs), len(together.tokens))
        self.assertFalse(mismatches, "\n".join(mismatches))
        self.assertGreaterEqual(peak["active"], 8, "requests hardly overlapped: at most %d slots "
                                "in use at once" % peak["active"])
        ok, info, waited = self.server.wait_model_idle(MODEL, timeout=2.0)
        self.assertTrue(ok, "slots still in use after every stream ended: %s" % info)


if __name__ == "__main__":
    unittest.main()
