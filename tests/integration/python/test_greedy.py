"""Greedy decoding through the server equals the golden fixtures.

Every causal PerformerLM fixture with prompt / greedy_tokens is served (the
list is read from the fixture folder, not hard-coded); its streamed tokens,
its unary tokens and the fixture's greedy_tokens must be identical. The
encoder-decoder fixture is compared too (its generation mask is all true, so
the API, which has no source mask, can reproduce it). A second server runs
the same checks with --prefill_chunk_tokens=3, so that every prompt is split
into a prefill chunk plus single-token steps.
"""

import unittest
import uuid

import grpc

import harness
from harness import pb

ENCDEC = "encdec_basic"


class GreedyFixtureTest(harness.ServerTestCase):
    NAME = "greedy"
    FLAGS = ("--max_batch=8",)

    @classmethod
    def models(cls, repo):
        cls.cases = harness.causal_greedy_cases()
        for case, _, _ in cls.cases:
            repo.add(case)
        cls.encdec = None
        if ENCDEC in harness.list_cases():
            repo.add(ENCDEC)
            cls.encdec_io = harness.load_safetensors(
                harness.fixture_dir(ENCDEC) + "/io.safetensors")
            repo.add(ENCDEC, name="encdec_with_start",
                     generation_config={"decoder_start_token_id": 1, "eos_token_id": 2})
            cls.encdec = ENCDEC

    def test_found_causal_cases(self):
        self.assertTrue(self.cases, "no causal PerformerLM greedy fixture found")
        names = [c for c, _, _ in self.cases]
        self.assertIn("lm_causal_default", names)

    def test_stream_equals_unary_equals_fixture(self):
        for case, config, io in self.cases:
            with self.subTest(case=case):
                prompt = io["prompt"].values
                expected = io["greedy_tokens"].values
                k = len(expected)
                request_id = "greedy-%s-%s" % (case, uuid.uuid4().hex[:8])
                req = harness.request(case, prompt, max_new_tokens=k, temperature=0.0,
                                      request_id=request_id)
                stream = harness.collect_stream(self.stub, req)
                self.assertStreamOk(stream, case)
                self.assertEqual(stream.tokens, expected, "%s: streamed tokens" % case)
                last = stream.last
                self.assertEqual(last.finish_reason, pb.FINISH_REASON_LENGTH,
                                 harness.finish_name(last.finish_reason))
                self.assertEqual(last.usage.prompt_tokens, len(prompt))
                self.assertEqual(last.usage.generated_tokens, k)
                for m in stream.messages:
                    self.assertEqual(m.request_id, request_id, "request_id echoed")
                t = last.timings
                self.assertGreaterEqual(t.queue_seconds, 0.0)
                self.assertGreater(t.total_seconds, 0.0)
                self.assertGreaterEqual(t.time_to_first_token_seconds, 0.0)
                self.assertLessEqual(t.time_to_first_token_seconds, t.total_seconds + 1e-9)
                self.assertLessEqual(t.queue_seconds, t.total_seconds + 1e-9)
                self.assertFalse(any(m.text for m in stream.messages),
                                 "text from a model without tokenizer")

                # Unary (test_lifecycle checks reusing a finished request's id).
                request_id += "-unary"
                req.request_id = request_id
                response, code, details, _ = harness.unary(self.stub, req)
                self.assertEqual(code, grpc.StatusCode.OK, details)
                self.assertEqual(list(response.token_ids), expected, "%s: unary tokens" % case)
                self.assertEqual(response.request_id, request_id)
                self.assertEqual(response.finish_reason, pb.FINISH_REASON_LENGTH)
                self.assertEqual(response.usage.prompt_tokens, len(prompt))
                self.assertEqual(response.usage.generated_tokens, k)
                self.assertEqual(len(response.logprobs), 0, "logprobs without return_logprobs")

    def test_generated_request_id(self):
        case, _, io = self.cases[0]
        req = harness.request(case, io["prompt"].values, max_new_tokens=2)
        stream = harness.collect_stream(self.stub, req)
        self.assertStreamOk(stream)
        ids = {m.request_id for m in stream.messages}
        self.assertEqual(len(ids), 1, ids)
        self.assertTrue(ids.pop(), "the server should generate a request_id")
        response, code, details, _ = harness.unary(self.stub, req)
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertTrue(response.request_id)

    def test_default_max_new_tokens_is_16(self):
        # No generation_config.json: max_new_tokens 0 means 16, greedy.
        io = dict((c, i) for c, _, i in self.cases).get("lm_causal_default")
        if io is None:
            self.fail("lm_causal_default is missing from %s" % harness.performer_fixtures())
        prompt = io["prompt"].values
        expected = io["greedy_tokens"].values
        response, code, details, _ = harness.unary(
            self.stub, harness.request("lm_causal_default", prompt))
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertEqual(len(response.token_ids), 16)
        self.assertEqual(list(response.token_ids)[:len(expected)], expected,
                         "a longer greedy run starts with the fixture's tokens")
        self.assertEqual(response.finish_reason, pb.FINISH_REASON_LENGTH)

    def test_repeated_requests_are_deterministic(self):
        case, _, io = self.cases[0]
        req = harness.request(case, io["prompt"].values,
                              max_new_tokens=len(io["greedy_tokens"].values))
        first = harness.collect_stream(self.stub, req).tokens
        for _ in range(3):
            self.assertEqual(harness.collect_stream(self.stub, req).tokens, first)

    def _encdec_request(self, model, with_prompt=True):
        io = self.encdec_io
        mask = io["gen_enc_mask"].values
        req = pb.GenerateRequest(model=model, max_new_tokens=io["gen_tokens"].shape[1],
                                 temperature=0.0)
        req.source_tokens.CopyFrom(pb.TokenIds(ids=io["gen_enc_tokens"].values))
        if with_prompt:
            req.prompt_tokens.CopyFrom(pb.TokenIds(ids=io["gen_start"].values))
        return req, all(mask)

    def test_encoder_decoder(self):
        if self.encdec is None:
            self.fail("encdec_basic is missing from %s" % harness.performer_fixtures())
        io = self.encdec_io
        req, mask_all_true = self._encdec_request(self.encdec)
        stream = harness.collect_stream(self.stub, req)
        self.assertStreamOk(stream)
        response, code, details, _ = harness.unary(self.stub, req)
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertEqual(stream.tokens, list(response.token_ids), "stream == unary")
        again = harness.collect_stream(self.stub, req)
        self.assertEqual(again.tokens, stream.tokens, "deterministic")
        k = io["gen_tokens"].shape[1]
        self.assertEqual(len(stream.tokens), k)
        self.assertEqual(stream.last.finish_reason, pb.FINISH_REASON_LENGTH)
        self.assertEqual(stream.last.usage.generated_tokens, k)
        # Usage.prompt_tokens: "decoder prompt (+ source for encoder-decoder)".
        self.assertEqual(stream.last.usage.prompt_tokens,
                         io["gen_start"].shape[1] + io["gen_enc_tokens"].shape[1])
        if mask_all_true:
            self.assertEqual(stream.tokens, io["gen_tokens"].values, "fixture gen_tokens")

    def test_encoder_decoder_decoder_start_from_generation_config(self):
        if self.encdec is None:
            self.fail("encdec_basic is missing from %s" % harness.performer_fixtures())
        io = self.encdec_io
        req, mask_all_true = self._encdec_request("encdec_with_start", with_prompt=False)
        stream = harness.collect_stream(self.stub, req)
        self.assertStreamOk(stream)
        explicit, _ = self._encdec_request("encdec_with_start", with_prompt=True)
        self.assertEqual(stream.tokens, harness.collect_stream(self.stub, explicit).tokens,
                         "empty prompt = decoder_start_token_id")
        if mask_all_true:
            # eos 2 is never produced by the fixture, so all K tokens come.
            self.assertEqual(stream.tokens, io["gen_tokens_with_eos"].values)


class GreedyChunkedPrefillTest(GreedyFixtureTest):
    """The same checks with prompts split into 3-token prefill chunks."""
    NAME = "greedy-chunked"
    FLAGS = ("--max_batch=8", "--prefill_chunk_tokens=3")


if __name__ == "__main__":
    unittest.main()
