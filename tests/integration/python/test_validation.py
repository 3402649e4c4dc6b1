"""Bad requests get the documented status code, with a message that names
the offending field, on both Generate and GenerateStream; the server keeps
serving good requests afterwards."""

import unittest

import grpc

import harness
from harness import pb

DECODER = "lm_causal_default"      # vocab 100, max_seq_len 48, no tokenizer
ENCDEC = "encdec_basic"            # enc/dec vocab 50, max_seq_len 32
ENCODER = "lm_bidir_padmask"       # bidirectional: Embed only
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def tokens(ids):
    return pb.TokenIds(ids=list(ids))


def empty_embed_request():
    req = pb.EmbedRequest(model=ENCODER)
    req.tokens.SetInParent()  # tokens present, with no id
    return req


class ValidationTest(harness.ServerTestCase):
    NAME = "validation"
    FLAGS = ("--max_batch=4", f"--default_model={DECODER}")

    @classmethod
    def models(cls, repo):
        repo.add_required(DECODER, ENCDEC, ENCODER)
        cfg = harness.load_json(harness.fixture_dir(DECODER) + "/config.json")
        cls.vocab = cfg["num_tokens"]
        cls.max_len = cfg["max_seq_len"]
        enc = harness.load_json(harness.fixture_dir(ENCDEC) + "/config.json")
        cls.enc_vocab = enc["enc_num_tokens"]
        cls.dec_vocab = enc["dec_num_tokens"]

    def good(self, **fields):
        return harness.request(DECODER, [1, 2, 3], max_new_tokens=4, **fields)

    def check_both(self, req, code, *fields, label=""):
        """Generate and GenerateStream both fail with `code` naming `fields`."""
        response, got, details, _ = harness.unary(self.stub, req)
        self.assertStatus(got, details, code, *fields, msg="Generate %s" % label)
        stream = harness.collect_stream(self.stub, req)
        self.assertStatus(stream.code, stream.details, code, *fields,
                          msg="GenerateStream %s" % label)
        self.assertFalse(stream.messages, "messages before an error status")

    def tearDown(self):
        # Whatever was refused, a good request still works.
        response, code, details, _ = harness.unary(self.stub, self.good())
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertEqual(len(response.token_ids), 4)

    # -- prompts -----------------------------------------------------------
    def test_empty_prompt(self):
        self.check_both(harness.request(DECODER, [], max_new_tokens=4), INVALID, "prompt",
                        label="empty prompt_tokens")
        self.check_both(pb.GenerateRequest(model=DECODER, max_new_tokens=4), INVALID, "prompt",
                        label="no prompt at all")

    def test_token_outside_vocabulary(self):
        self.check_both(harness.request(DECODER, [1, self.vocab, 2], max_new_tokens=4), INVALID,
                        "prompt", label="id == vocab")
        self.check_both(harness.request(DECODER, [1, -1], max_new_tokens=4), INVALID, "prompt",
                        label="negative id")
        # The largest id is fine.
        response, code, details, _ = harness.unary(
            self.stub, harness.request(DECODER, [self.vocab - 1], max_new_tokens=2))
        self.assertEqual(code, grpc.StatusCode.OK, details)

    def test_prompt_plus_max_new_tokens_past_max_length(self):
        prompt = [3] * 8
        too_many = self.max_len - len(prompt) + 1
        self.check_both(harness.request(DECODER, prompt, max_new_tokens=too_many), INVALID,
                        "max_new_tokens", label="prompt + max_new_tokens > max_seq_len")
        self.check_both(harness.request(DECODER, [3] * (self.max_len + 1), max_new_tokens=1),
                        INVALID, label="prompt alone too long")
        # Exactly at the limit is fine.
        response, code, details, _ = harness.unary(
            self.stub, harness.request(DECODER, prompt, max_new_tokens=too_many - 1))
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertEqual(len(response.token_ids), too_many - 1)

    def test_text_for_model_without_tokenizer(self):
        self.check_both(harness.request(DECODER, text="hello", max_new_tokens=4), INVALID,
                        "prompt_text")

    # -- sampling parameters ------------------------------------------------
    def test_negative_temperature(self):
        self.check_both(self.good(temperature=-0.5), INVALID, "temperature")

    def test_top_p_outside_unit_interval(self):
        for value in (0.0, -0.1, 1.5):
            self.check_both(self.good(temperature=1.0, top_p=value, seed=1), INVALID, "top_p",
                            label="top_p=%s" % value)
        response, code, details, _ = harness.unary(
            self.stub, self.good(temperature=1.0, top_p=1.0, seed=1))
        self.assertEqual(code, grpc.StatusCode.OK, details)

    def test_top_k_out_of_range(self):
        self.check_both(self.good(temperature=1.0, top_k=-1, seed=1), INVALID, "top_k",
                        label="top_k=-1")
        self.check_both(self.good(temperature=1.0, top_k=self.vocab + 1, seed=1), INVALID,
                        "top_k", label="top_k=vocab+1")
        response, code, details, _ = harness.unary(
            self.stub, self.good(temperature=1.0, top_k=self.vocab, seed=1))
        self.assertEqual(code, grpc.StatusCode.OK, details)

    def test_repetition_penalty_not_positive(self):
        for value in (0.0, -1.0):
            self.check_both(self.good(repetition_penalty=value), INVALID, "repetition_penalty",
                            label="repetition_penalty=%s" % value)

    def test_stop_token_ids_outside_vocabulary(self):
        self.check_both(self.good(stop_token_ids=[self.vocab]), INVALID, "stop_token_ids",
                        label="stop id == vocab")
        self.check_both(self.good(stop_token_ids=[-1]), INVALID, "stop_token_ids",
                        label="negative stop id")

    def test_non_finite_sampling_parameters(self):
        nan, inf = float("nan"), float("inf")
        self.check_both(self.good(temperature=nan), INVALID, "temperature", label="nan")
        self.check_both(self.good(temperature=inf), INVALID, "temperature", label="inf")
        self.check_both(self.good(temperature=1.0, top_p=nan, seed=1), INVALID, "top_p",
                        label="nan")
        self.check_both(self.good(repetition_penalty=nan), INVALID, "repetition_penalty",
                        label="nan")

    def test_negative_max_new_tokens(self):
        self.check_both(harness.request(DECODER, [1, 2], max_new_tokens=-1), INVALID,
                        "max_new_tokens")

    def test_stop_strings_need_a_tokenizer(self):
        self.check_both(self.good(stop_strings=["x"]), INVALID, "stop_strings")

    # -- encoder-decoder ----------------------------------------------------
    def test_source_for_decoder_only_model(self):
        req = self.good()
        req.source_tokens.CopyFrom(tokens([1, 2, 3]))
        self.check_both(req, INVALID, "source")

    def test_missing_source_for_encoder_decoder(self):
        req = pb.GenerateRequest(model=ENCDEC, max_new_tokens=4, prompt_tokens=tokens([1]))
        self.check_both(req, INVALID, "source")

    def test_encoder_decoder_without_prompt_or_decoder_start(self):
        # No prompt and no decoder_start_token_id (no generation_config.json).
        req = pb.GenerateRequest(model=ENCDEC, max_new_tokens=4, source_tokens=tokens([1, 2]))
        self.check_both(req, INVALID, "prompt")

    def test_empty_source(self):
        req = pb.GenerateRequest(model=ENCDEC, max_new_tokens=4, prompt_tokens=tokens([1]))
        req.source_tokens.SetInParent()
        self.check_both(req, INVALID, "source")

    def test_source_token_outside_vocabulary(self):
        req = pb.GenerateRequest(model=ENCDEC, max_new_tokens=4, prompt_tokens=tokens([1]),
                                 source_tokens=tokens([1, self.enc_vocab]))
        self.check_both(req, INVALID, "source")
        req = pb.GenerateRequest(model=ENCDEC, max_new_tokens=4, prompt_tokens=tokens([1]),
                                 source_tokens=tokens([1, 2, 3]))
        response, code, details, _ = harness.unary(self.stub, req)
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertEqual(len(response.token_ids), 4)

    # -- models -------------------------------------------------------------
    def test_unknown_model(self):
        req = harness.request("no_such_model", [1, 2], max_new_tokens=2)
        self.check_both(req, grpc.StatusCode.NOT_FOUND, "no_such_model")
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.GetModel(pb.GetModelRequest(name="no_such_model"), timeout=10)
        self.assertStatus(ctx.exception.code(), ctx.exception.details(),
                          grpc.StatusCode.NOT_FOUND, "no_such_model")
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Embed(pb.EmbedRequest(model="no_such_model", tokens=tokens([1])),
                            timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_default_model(self):
        response, code, details, _ = harness.unary(
            self.stub, harness.request("", [1, 2, 3], max_new_tokens=4))
        self.assertEqual(code, grpc.StatusCode.OK, details)
        explicit, _, _, _ = harness.unary(self.stub, self.good())
        self.assertEqual(list(response.token_ids), list(explicit.token_ids))

    def test_generate_on_encoder_only_model(self):
        req = harness.request(ENCODER, [1, 2, 3], max_new_tokens=4)
        self.check_both(req, grpc.StatusCode.FAILED_PRECONDITION)

    def test_embed_on_decoder_only_model(self):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Embed(pb.EmbedRequest(model=DECODER, tokens=tokens([1, 2, 3])), timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.FAILED_PRECONDITION,
                         ctx.exception.details())

    def test_embed_bad_inputs(self):
        for label, req in (
                ("empty tokens", empty_embed_request()),
                ("id outside vocab", pb.EmbedRequest(model=ENCODER, tokens=tokens([1, 10**6]))),
                ("text without tokenizer", pb.EmbedRequest(model=ENCODER, text="abc"))):
            with self.subTest(label):
                with self.assertRaises(grpc.RpcError) as ctx:
                    self.stub.Embed(req, timeout=10)
                self.assertEqual(ctx.exception.code(), INVALID, ctx.exception.details())

    def test_many_bad_requests_then_good(self):
        for i in range(50):
            harness.unary(self.stub, harness.request(DECODER, [self.vocab + i], max_new_tokens=1))
        response, code, details, _ = harness.unary(self.stub, self.good())
        self.assertEqual(code, grpc.StatusCode.OK, details)
        ok, info, _ = self.server.wait_model_idle(DECODER, timeout=2.0)
        self.assertTrue(ok, "refused requests left slots in use: %s" % info)


class MaxNewTokensLimitTest(harness.ServerTestCase):
    """--max_new_tokens_limit: a larger request is refused, a larger model
    default (16 without generation_config.json, or its max_new_tokens) is
    capped."""
    NAME = "limit"
    LIMIT = 5
    FLAGS = ("--max_new_tokens_limit=%d" % LIMIT,)

    @classmethod
    def models(cls, repo):
        harness.require_cases(DECODER)
        repo.add(DECODER)
        repo.add(DECODER, name="long_default", generation_config={"max_new_tokens": 30})

    def test_request_above_limit(self):
        req = harness.request(DECODER, [1, 2, 3], max_new_tokens=self.LIMIT + 1)
        response, code, details, _ = harness.unary(self.stub, req)
        self.assertStatus(code, details, INVALID, "max_new_tokens")
        req.max_new_tokens = self.LIMIT
        response, code, details, _ = harness.unary(self.stub, req)
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertEqual(len(response.token_ids), self.LIMIT)

    def test_model_default_is_capped(self):
        for model in (DECODER, "long_default"):
            with self.subTest(model=model):
                response, code, details, _ = harness.unary(
                    self.stub, harness.request(model, [1, 2, 3]))
                self.assertEqual(code, grpc.StatusCode.OK, details)
                self.assertEqual(len(response.token_ids), self.LIMIT)
                self.assertEqual(response.finish_reason, pb.FINISH_REASON_LENGTH)


if __name__ == "__main__":
    unittest.main()
