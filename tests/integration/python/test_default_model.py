"""The repository's own models/ folder (what the README's first command
serves): it loads, its byte tokenizer gives text, and text stays valid UTF-8
whatever bytes the model emits (a byte-level model can emit any byte, and a
protobuf string field must hold valid UTF-8)."""

import os
import subprocess
import unittest

import grpc

import harness
from harness import pb

REPO_MODELS = os.path.normpath(os.path.join(os.environ.get("PROTO_DIR", ""), "..", "models"))
MODEL = "performer-byte-tiny"


class DefaultModelTest(harness.ServerTestCase):
    NAME = "default_model"
    FLAGS = ("--max_batch=4",)

    @classmethod
    def repository_dir(cls):
        if not os.path.isdir(os.path.join(REPO_MODELS, MODEL)):
            raise unittest.SkipTest("%s is absent" % os.path.join(REPO_MODELS, MODEL))
        return REPO_MODELS

    def test_listed_as_the_default_byte_model(self):
        listing = self.stub.ListModels(pb.ListModelsRequest(), timeout=10)
        self.assertEqual(listing.default_model, MODEL)
        info = self.stub.GetModel(pb.GetModelRequest(name=""), timeout=10)
        self.assertEqual(info.name, MODEL)
        self.assertEqual(info.kind, pb.MODEL_KIND_DECODER)
        self.assertEqual(info.tokenizer, "byte")
        self.assertEqual(info.vocab_size, 256)
        self.assertGreater(info.state_bytes_per_sequence, 0)

    def test_sampled_bytes_always_give_valid_text(self):
        # Sampling at temperature 1 from an untrained byte model emits bytes
        # >= 0x80 in arbitrary order: invalid UTF-8 unless the server cleans
        # it. The Python runtime refuses a response with an invalid string.
        saw_high_byte = False
        for seed in range(4):
            request = pb.GenerateRequest(prompt_text="Hello", max_new_tokens=64, temperature=1.0,
                                         seed=seed)
            text = ""
            tokens = []
            last = None
            for message in self.stub.GenerateStream(request, timeout=60):
                text += message.text
                tokens += list(message.token_ids)
                last = message
            self.assertEqual(last.finish_reason, pb.FINISH_REASON_LENGTH)
            self.assertEqual(len(tokens), 64)
            saw_high_byte = saw_high_byte or any(t >= 0x80 for t in tokens)
            # Every ASCII token's character is in the text, in order.
            ascii_text = "".join(chr(t) for t in tokens if t < 0x80)
            self.assertEqual("".join(c for c in text if ord(c) < 0x80), ascii_text)
            unary = self.stub.Generate(request, timeout=60)
            self.assertEqual(list(unary.token_ids), tokens)
            self.assertEqual(unary.text, text)
        self.assertTrue(saw_high_byte, "the test needs some non-ASCII bytes")

    def test_help_lists_the_flags(self):
        result = subprocess.run([harness.server_binary(), "--help"], capture_output=True,
                                text=True, timeout=30)
        for flag in ("--port", "--model_repository", "--max_batch", "--max_queue",
                     "--max_new_tokens_limit", "--max_message_bytes", "--keepalive_time_ms",
                     "--drain_timeout", "--intra_op_threads"):
            self.assertIn(flag, result.stdout + result.stderr)


if __name__ == "__main__":
    unittest.main()
