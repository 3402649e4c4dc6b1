"""performer-train end to end, as a user runs it: train a tiny byte-level
PerformerLM on a text, export it (bf16) as a model folder, serve that folder
with performer-serve, and query it with performer-client. The text is a
short cycle of sentences, so a model that really learned it continues a
prompt with the next words of the cycle under greedy decoding; an export or
loading bug (wrong weights, wrong projection, wrong dtype) cannot."""

import json
import os
import re
import struct
import subprocess
import unittest

import harness
from harness import pb

CYCLE = ("the quick brown fox jumps over the lazy dog. "
         "pack my box with five dozen liquor jugs. ")
MODEL = "tiny-trained"
STEPS = 300


def trainer_binary():
    return os.environ.get("PERFORMER_TRAIN") or os.path.join(harness.REPO, "build", "tools",
                                                             "performer-train")


def client_binary():
    return os.environ.get("PERFORMER_CLIENT") or os.path.join(harness.REPO, "build", "tools",
                                                              "performer-client")


class TrainServeTest(harness.ServerTestCase):
    NAME = "train_serve"
    FLAGS = ("--max_batch=4",)

    @classmethod
    def repository_dir(cls):
        work = harness.make_temp_dir("train")
        corpus = os.path.join(work, "cycle.txt")
        with open(corpus, "w") as f:
            f.write(CYCLE * 300)
        repo = os.path.join(work, "repo")
        os.makedirs(repo)
        cls.model_dir = os.path.join(repo, MODEL)
        command = [trainer_binary(), "--corpus=" + corpus, "--out=" + cls.model_dir,
                   "--checkpoint_dir=" + os.path.join(work, "checkpoints"),
                   "--dim=32", "--depth=1", "--heads=2", "--dim_head=16",
                   "--local_attn_heads=1", "--local_window_size=16", "--nb_features=16",
                   "--max_seq_len=256", "--seq_len=64", "--batch_size=8",
                   "--steps=%d" % STEPS, "--lr=5e-3", "--warmup_steps=10", "--val_every=100",
                   "--checkpoint_every=0", "--log_every=100", "--threads=1", "--dtype=bf16",
                   "--seed=1"]
        cls.train = subprocess.run(command, capture_output=True, text=True, timeout=240)
        if cls.train.returncode != 0:
            raise AssertionError("performer-train failed (%d):\n%s"
                                 % (cls.train.returncode, cls.train.stderr[-3000:]))
        return repo

    def test_validation_loss_falls(self):
        losses = [float(v) for v in
                  re.findall(r"validation loss ([0-9.]+)", self.train.stderr + self.train.stdout)]
        self.assertEqual(len(losses), STEPS // 100, self.train.stderr[-2000:])
        self.assertLess(losses[-1], losses[0])
        # Below 1 bit per byte: the 87-byte cycle is close to memorised.
        self.assertLess(losses[-1] / 0.6931471805599453, 1.0)

    def test_exported_folder_is_the_serving_format_in_bf16(self):
        for name in ("config.json", "weights.safetensors", "tokenizer.json"):
            self.assertTrue(os.path.isfile(os.path.join(self.model_dir, name)), name)
        with open(os.path.join(self.model_dir, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["model_class"], "PerformerLM")
        self.assertEqual(config["dim"], 32)
        with open(os.path.join(self.model_dir, "weights.safetensors"), "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
        dtypes = {entry["dtype"] for name, entry in header.items() if name != "__metadata__"}
        self.assertEqual(dtypes, {"BF16"})

    def test_served_model_continues_the_text(self):
        info = self.stub.GetModel(pb.GetModelRequest(name=MODEL), timeout=10)
        self.assertEqual(info.kind, pb.MODEL_KIND_DECODER)
        self.assertEqual(info.vocab_size, 256)
        prompt = "the quick brown fox jumps over the lazy dog. pack my"
        result = harness.collect_stream(
            self.stub, pb.GenerateRequest(model=MODEL, prompt_text=prompt, max_new_tokens=24,
                                          temperature=0.0), timeout=60)
        self.assertStreamOk(result)
        self.assertTrue(result.text.startswith(" box with five dozen"), repr(result.text))

    def test_performer_client_streams_the_completion(self):
        result = subprocess.run(
            [client_binary(), "--server=" + self.server.address, "generate", "--model=" + MODEL,
             "--temperature=0", "--max_new_tokens=16", "pack my box with five"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stdout.startswith(" dozen liquor"), repr(result.stdout))


if __name__ == "__main__":
    unittest.main()
