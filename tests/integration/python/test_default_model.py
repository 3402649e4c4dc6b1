"""The repository's own models/ folder (what the README's first command
serves): the trained default model loads, is the default, and continues a
prompt with English words, not arbitrary bytes. And text stays valid UTF-8
whatever bytes a byte-level model emits (a protobuf string field must hold
valid UTF-8): checked on an untrained model of the same shape, made by
performer-init-model, which emits bytes >= 0x80 in arbitrary order."""

import json
import os
import re
import shutil
import subprocess
import time
import unittest

import harness
from harness import pb

REPO_MODELS = os.path.join(harness.REPO, "models")
MODEL = "performer-fortunes"
# The training corpus's source (Debian package fortunes / fortunes-min).
FORTUNES_DIR = "/usr/share/games/fortunes"


def init_model_binary():
    return os.environ.get("PERFORMER_INIT_MODEL") or os.path.join(
        harness.REPO, "build", "tools", "performer-init-model")


def corpus_words():
    words = set()
    for name in os.listdir(FORTUNES_DIR):
        path = os.path.join(FORTUNES_DIR, name)
        if name.endswith((".dat", ".u8")) or not os.path.isfile(path):
            continue
        with open(path, encoding="latin-1") as f:
            words.update(w.lower() for w in re.findall(r"[A-Za-z]+", f.read()))
    return words


class DefaultModelTest(harness.ServerTestCase):
    NAME = "default_model"
    FLAGS = ("--max_batch=4",)

    @classmethod
    def repository_dir(cls):
        if not os.path.isdir(os.path.join(REPO_MODELS, MODEL)):
            raise AssertionError("%s is missing" % os.path.join(REPO_MODELS, MODEL))
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
        # float32 weights by default: 1,875,328 parameters of 4 bytes, the
        # buffers and the decode step's fused q/k/v copy.
        self.assertEqual(info.weight_dtype, "fp32")
        self.assertGreater(info.weight_bytes, 1875328 * 4)
        self.assertLess(info.weight_bytes, 1875328 * 4 * 2)

    def test_shipped_weights_are_bf16(self):
        path = os.path.join(REPO_MODELS, MODEL, "weights.safetensors")
        with open(path, "rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(header_len))
        self.assertEqual({e["dtype"] for k, e in header.items() if k != "__metadata__"}, {"BF16"})
        self.assertLess(os.path.getsize(path), 8 << 20)

    def test_continuations_are_english_words(self):
        check_english_continuations(self)


def check_english_continuations(test):
    """Sampled continuations of four prompts are mostly corpus words."""
    if not os.path.isdir(FORTUNES_DIR):
        test.fail("%s is missing: apt-get install fortunes (tools/install_deps.sh)"
                  % FORTUNES_DIR)
    vocabulary = corpus_words()
    generated = []
    for prompt, seed in (("The meaning of life is", 1), ("A programmer", 2),
                         ("Never trust a man who", 3), ("Q: Why did the chicken", 4)):
        reply = test.stub.Generate(
            pb.GenerateRequest(prompt_text=prompt, max_new_tokens=160, seed=seed),
            timeout=60)
        test.assertEqual(reply.usage.generated_tokens, 160)
        generated.append(reply.text)
    text = " ".join(generated)
    # Letters, spaces and punctuation, as the corpus: not arbitrary bytes.
    printable = sum(1 for c in text if c.isprintable() or c in "\n\t")
    test.assertGreater(printable / len(text), 0.97, repr(text))
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", text)]
    test.assertGreater(len(words), 60, repr(text))
    known = sum(1 for w in words if w in vocabulary)
    # An untrained byte model scores ~0 here; a character model that
    # learned English spells most of its words right.
    test.assertGreater(known / len(words), 0.75, repr(text))


# The default model's parameters and buffers are 2,342,336 values, 9,369,344
# bytes in float32; its linear layers (q/k/v/out projections, feed-forwards,
# output head) hold LINEAR_WEIGHTS of them and are served in --weight_dtype,
# prefill and decode (tests/deploy/check_kubernetes.sh counts the same).
FP32_WEIGHT_BYTES = 9369344
LINEAR_WEIGHTS = 4 * (4 * 192 * 192 + 2 * 192 * 768) + 256 * 192


class Bf16WeightsTest(harness.ServerTestCase):
    """--weight_dtype=bf16: the linear layers served in bf16."""
    NAME = "bf16_weights"
    FLAGS = ("--max_batch=4", "--weight_dtype=bf16")
    DTYPE = "bf16"
    BYTES_PER_LINEAR_WEIGHT = 2.0

    @classmethod
    def repository_dir(cls):
        return REPO_MODELS

    def test_reported_and_counted(self):
        info = self.stub.GetModel(pb.GetModelRequest(name=MODEL), timeout=10)
        self.assertEqual(info.weight_dtype, self.DTYPE)
        # No float32 copy of the linear layers is kept.
        expected = FP32_WEIGHT_BYTES - LINEAR_WEIGHTS * (4 - self.BYTES_PER_LINEAR_WEIGHT)
        self.assertEqual(info.weight_bytes, expected)

    def test_continuations_are_english_words(self):
        check_english_continuations(self)

    def test_greedy_streamed_equals_unary(self):
        request = pb.GenerateRequest(prompt_text="A programmer", max_new_tokens=48,
                                     temperature=0.0)
        tokens = []
        for message in self.stub.GenerateStream(request, timeout=60):
            tokens += list(message.token_ids)
        self.assertEqual(len(tokens), 48)
        self.assertEqual(list(self.stub.Generate(request, timeout=60).token_ids), tokens)

    def test_an_unknown_dtype_is_refused_at_start(self):
        result = subprocess.run([harness.server_binary(), "--weight_dtype=int4",
                                 "--model_repository=" + REPO_MODELS, "--port=0",
                                 "--metrics_port=-1"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 2, result.stderr[-2000:])
        self.assertIn("--weight_dtype must be fp32, bf16 or int8, got 'int4'", result.stderr)


class Int8WeightsTest(Bf16WeightsTest):
    """--weight_dtype=int8: the linear layers served in int8 with block scales."""
    NAME = "int8_weights"
    FLAGS = ("--max_batch=4", "--weight_dtype=int8")
    DTYPE = "int8"
    BYTES_PER_LINEAR_WEIGHT = 1.125


class UntrainedBytesTest(harness.ServerTestCase):
    NAME = "untrained_bytes"
    FLAGS = ("--max_batch=4",)

    @classmethod
    def repository_dir(cls):
        repo = harness.make_temp_dir("untrained")
        out = os.path.join(repo, "untrained")
        result = subprocess.run(
            [init_model_binary(), "--config=" + os.path.join(REPO_MODELS, MODEL, "config.json"),
             "--out=" + out, "--seed=0"], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise AssertionError("performer-init-model failed:\n" + result.stderr[-2000:])
        shutil.copy(os.path.join(REPO_MODELS, MODEL, "tokenizer.json"), out)
        return repo

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
                     "--drain_timeout", "--intra_op_threads", "--device"):
            self.assertIn(flag, result.stdout + result.stderr)

    def test_device_cuda_is_refused_at_start_without_cuda(self):
        # Without a CUDA LibTorch or a visible GPU: exit 2, naming the reason.
        # Where both are present the server starts instead: then it must
        # become ready (write its port file) on the GPU.
        port_file = os.path.join(harness.make_temp_dir("cuda"), "port")
        proc = subprocess.Popen([harness.server_binary(), "--device=cuda",
                                 "--model_repository=" + self.server.repository_dir,
                                 "--host=127.0.0.1", "--port=0", "--port_file=" + port_file,
                                 "--metrics_port=-1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=harness._die_with_parent)
        deadline = time.monotonic() + 60
        while (proc.poll() is None and harness.read_port_file(port_file) is None
               and time.monotonic() < deadline):
            time.sleep(0.05)
        if proc.poll() is None:
            ready = harness.read_port_file(port_file) is not None
            proc.kill()
            _, stderr = proc.communicate(timeout=30)
            self.assertTrue(ready, "--device=cuda neither failed nor became ready in 60 s:\n"
                            + stderr[-2000:])
            return
        _, stderr = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 2, stderr)
        self.assertRegex(stderr, r"--device=cuda: (this build's LibTorch has no CUDA|"
                                 r"no CUDA device is visible)")

if __name__ == "__main__":
    unittest.main()
