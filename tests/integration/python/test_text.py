"""Text and stopping: a byte tokenizer (token id = byte value) on a copy of a
causal fixture model, stop strings across token boundaries, eos from
generation_config.json (and ignore_eos), stop_token_ids, log-probabilities and
seeded sampling."""

import math
import unittest

import grpc

import harness
from harness import pb

BASE = "lm_reversible_causal"  # vocab 128: every ASCII byte is a valid token
TEXT_MODEL = "byte_lm"
EOS_MODEL = "byte_lm_eos"
EOS_DEFAULT_MAX_NEW = 10
PROMPT_TEXT = "Hello, performer!"


def first_new_index(seq, start):
    """The first index >= start whose value does not occur before it."""
    for i in range(start, len(seq)):
        if seq[i] not in seq[:i]:
            return i
    return None


class TextGenerationTest(harness.ServerTestCase):
    NAME = "text"
    FLAGS = ("--max_batch=8",)

    @classmethod
    def models(cls, repo):
        harness.require_cases(BASE)
        config = harness.load_json(harness.fixture_dir(BASE) + "/config.json")
        io = harness.load_safetensors(harness.fixture_dir(BASE) + "/io.safetensors")
        cls.vocab = config["num_tokens"]
        cls.max_len = config["max_seq_len"]
        cls.prompt = io["prompt"].values
        cls.greedy = io["greedy_tokens"].values
        if cls.vocab < 128 or max(cls.prompt + cls.greedy) >= 128:
            raise AssertionError("%s does not fit a byte tokenizer's ASCII range" % BASE)
        cls.eos_index = first_new_index(cls.greedy, 2)
        cls.eos = cls.greedy[cls.eos_index]
        repo.add(BASE, name=TEXT_MODEL, tokenizer={"type": "byte"})
        repo.add(BASE, name=EOS_MODEL, tokenizer={"type": "byte"},
                 generation_config={"eos_token_id": cls.eos,
                                    "max_new_tokens": EOS_DEFAULT_MAX_NEW})

    # -- helpers -----------------------------------------------------------
    def both(self, req):
        """(stream result, unary response); both must succeed and agree."""
        stream = harness.collect_stream(self.stub, req)
        self.assertStreamOk(stream)
        response, code, details, _ = harness.unary(self.stub, req)
        self.assertEqual(code, grpc.StatusCode.OK, details)
        self.assertEqual(stream.tokens, list(response.token_ids), "stream == unary tokens")
        self.assertEqual(stream.text, response.text, "stream == unary text")
        self.assertEqual(stream.last.finish_reason, response.finish_reason)
        return stream, response

    def learn(self, text, max_new_tokens):
        req = harness.request(TEXT_MODEL, text=text, max_new_tokens=max_new_tokens,
                              temperature=0.0)
        stream, response = self.both(req)
        tokens = list(response.token_ids)
        self.assertEqual(len(tokens), max_new_tokens)
        self.assertEqual(response.text, bytes(tokens).decode("ascii"),
                         "byte tokenizer: text = the bytes of the tokens")
        return tokens, response.text

    # -- tests -------------------------------------------------------------
    def test_model_info_names_tokenizer(self):
        info = self.server.model_info(TEXT_MODEL)
        self.assertEqual(info.tokenizer, "byte")

    def test_text_prompt_equals_token_prompt_and_fixture(self):
        text = bytes(self.prompt).decode("ascii")
        req = harness.request(TEXT_MODEL, text=text, max_new_tokens=len(self.greedy),
                              temperature=0.0)
        stream, response = self.both(req)
        self.assertEqual(list(response.token_ids), self.greedy)
        self.assertEqual(response.text, bytes(self.greedy).decode("ascii"))
        self.assertEqual(response.usage.prompt_tokens, len(self.prompt))
        self.assertEqual(response.finish_reason, pb.FINISH_REASON_LENGTH)
        for m in stream.messages:
            self.assertEqual(m.text, bytes(m.token_ids).decode("ascii"),
                             "each message's text belongs to its tokens")
        # Token ids still work on a model with a tokenizer (text comes back).
        by_ids = harness.request(TEXT_MODEL, self.prompt, max_new_tokens=len(self.greedy))
        s2, r2 = self.both(by_ids)
        self.assertEqual(list(r2.token_ids), self.greedy)
        self.assertEqual(r2.text, response.text)

    def test_non_ascii_text_outside_small_vocabulary(self):
        # 'é' is two bytes >= 128, outside this model's 128-token vocabulary.
        req = harness.request(TEXT_MODEL, text="caf\u00e9", max_new_tokens=2)
        response, code, details, _ = harness.unary(self.stub, req)
        self.assertStatus(code, details, grpc.StatusCode.INVALID_ARGUMENT, "prompt")

    def test_stop_string_across_token_boundaries(self):
        max_new = min(24, self.max_len - len(PROMPT_TEXT))
        tokens, text = self.learn(PROMPT_TEXT, max_new)
        # A 3-character stop string = 3 tokens, first occurring at j >= 1 in
        # the generated text and absent from the prompt.
        choice = None
        for j in range(1, len(text) - 2):
            s = text[j:j + 3]
            if text.find(s) == j and s not in PROMPT_TEXT:
                choice = (j, s)
                break
        if choice is None:
            self.fail("no usable stop string in %r" % text)
        j, stop = choice
        req = harness.request(TEXT_MODEL, text=PROMPT_TEXT, max_new_tokens=max_new,
                              temperature=0.0, stop_strings=[stop])
        stream, response = self.both(req)
        self.assertEqual(response.finish_reason, pb.FINISH_REASON_STOP_STRING,
                         harness.finish_name(response.finish_reason))
        self.assertTrue(response.text.endswith(stop), "%r should end with %r"
                        % (response.text, stop))
        self.assertEqual(response.text, text[:j + 3])
        self.assertEqual(list(response.token_ids), tokens[:j + 3])
        self.assertEqual(response.usage.generated_tokens, j + 3)
        self.assertEqual(stream.text, text[:j + 3], "streamed text stops at the stop string")

        # Of two stop strings the earlier match wins; one that never occurs
        # changes nothing.
        later = text[j + 1:j + 4] if j + 4 <= len(text) else None
        req = harness.request(TEXT_MODEL, text=PROMPT_TEXT, max_new_tokens=max_new,
                              temperature=0.0,
                              stop_strings=[s for s in ("\x7f\x7f never", later, stop) if s])
        stream, response = self.both(req)
        self.assertEqual(response.text, text[:j + 3])
        req = harness.request(TEXT_MODEL, text=PROMPT_TEXT, max_new_tokens=max_new,
                              temperature=0.0, stop_strings=["\x7f\x7f never"])
        stream, response = self.both(req)
        self.assertEqual(response.text, text)
        self.assertEqual(response.finish_reason, pb.FINISH_REASON_LENGTH)

    def test_stop_token_ids(self):
        max_new = min(24, self.max_len - len(PROMPT_TEXT))
        tokens, text = self.learn(PROMPT_TEXT, max_new)
        k = first_new_index(tokens, 1)
        if k is None:
            self.fail("no token to stop on in %s" % tokens)
        req = harness.request(TEXT_MODEL, text=PROMPT_TEXT, max_new_tokens=max_new,
                              temperature=0.0, stop_token_ids=[tokens[k]])
        stream, response = self.both(req)
        self.assertEqual(response.finish_reason, pb.FINISH_REASON_STOP_TOKEN,
                         harness.finish_name(response.finish_reason))
        self.assertEqual(list(response.token_ids), tokens[:k + 1], "the stop token is included")
        self.assertEqual(response.usage.generated_tokens, k + 1)

    def test_eos_from_generation_config(self):
        k = len(self.greedy)
        req = harness.request(EOS_MODEL, self.prompt, max_new_tokens=k, temperature=0.0)
        stream, response = self.both(req)
        self.assertEqual(response.finish_reason, pb.FINISH_REASON_EOS,
                         harness.finish_name(response.finish_reason))
        self.assertEqual(list(response.token_ids), self.greedy[:self.eos_index + 1],
                         "stops after (and including) eos %d" % self.eos)
        self.assertEqual(response.usage.generated_tokens, self.eos_index + 1)

        req.ignore_eos = True
        stream, response = self.both(req)
        self.assertEqual(response.finish_reason, pb.FINISH_REASON_LENGTH)
        self.assertEqual(list(response.token_ids), self.greedy)

    def test_max_new_tokens_from_generation_config(self):
        req = harness.request(EOS_MODEL, self.prompt, ignore_eos=True)
        stream, response = self.both(req)
        self.assertEqual(len(response.token_ids), EOS_DEFAULT_MAX_NEW)
        self.assertEqual(list(response.token_ids), self.greedy[:EOS_DEFAULT_MAX_NEW])
        self.assertEqual(response.finish_reason, pb.FINISH_REASON_LENGTH)

    def test_logprobs(self):
        req = harness.request(TEXT_MODEL, self.prompt, max_new_tokens=len(self.greedy),
                              temperature=0.0, return_logprobs=True)
        stream, response = self.both(req)
        self.assertEqual(list(response.token_ids), self.greedy)
        self.assertLogprobs(list(response.logprobs), self.greedy, self.vocab)
        self.assertLogprobs(stream.logprobs, stream.tokens, self.vocab)
        for m in stream.messages:
            self.assertEqual(len(m.logprobs), len(m.token_ids))
        for a, b in zip(stream.logprobs, response.logprobs):
            self.assertAlmostEqual(a, b, places=5)
        # A greedy token is the argmax, so its probability is at least 1/vocab.
        for lp in response.logprobs:
            self.assertGreaterEqual(lp, -math.log(self.vocab) - 1e-4)
        # Sampled tokens get logprobs too.
        req = harness.request(TEXT_MODEL, self.prompt, max_new_tokens=8, temperature=0.8,
                              seed=7, return_logprobs=True)
        stream, response = self.both(req)
        self.assertLogprobs(list(response.logprobs), list(response.token_ids), self.vocab)

    def test_seeded_sampling_is_reproducible(self):
        def sample(seed, **extra):
            req = harness.request(TEXT_MODEL, text=PROMPT_TEXT, max_new_tokens=20,
                                  temperature=1.0, seed=seed, **extra)
            stream, response = self.both(req)  # stream == unary for the same seed
            return list(response.token_ids)

        first = sample(1234)
        self.assertEqual(sample(1234), first, "same seed, same tokens")
        outputs = {tuple(sample(seed)) for seed in (1, 2, 3, 4, 5)}
        self.assertGreater(len(outputs), 1, "different seeds all gave the same tokens")
        filtered = sample(99, top_k=10, top_p=0.9, repetition_penalty=1.3)
        self.assertEqual(sample(99, top_k=10, top_p=0.9, repetition_penalty=1.3), filtered)
        for t in filtered:
            self.assertTrue(0 <= t < self.vocab)

    def test_temperature_unset_is_model_default_greedy(self):
        req = harness.request(TEXT_MODEL, self.prompt, max_new_tokens=len(self.greedy))
        self.assertFalse(req.HasField("temperature"))
        stream, response = self.both(req)
        self.assertEqual(list(response.token_ids), self.greedy)


if __name__ == "__main__":
    unittest.main()
