#!/usr/bin/python3
"""Tests of tools/export_fast_transformers.py against the FastTransformersLM fixtures.

Run: /usr/bin/python3 tests/tools/export_fast_transformers_test.py   (needs torch + numpy)
Fixtures: <repo>/tests/fixtures/fast_transformers_lm (missing, the test fails).

Every fixture folder's config.json + weights.safetensors are turned into checkpoints (a dict with
state_dict and config, a bare state_dict with --config, a wrapped "module." state_dict), exported,
and compared with the original folder (which the C++ parity suite runs): config.json equal as
dicts, tensors bit-identical. Also covered: --dtype, each validation failure (missing, unexpected and mis-shaped keys, bad
configuration, non-finite values) and overwrite protection.
"""

import collections
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTER = os.path.join(REPO, "tools", "export_fast_transformers.py")
FAMILY = os.path.join(REPO, "tests", "fixtures", "fast_transformers_lm")
PYTHON = sys.executable


def read_safetensors(path):
    """An independent reader: name -> (dtype name, shape, raw bytes), in file order."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n], object_pairs_hook=collections.OrderedDict)
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    return collections.OrderedDict(
        (k, (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]))
        for k, v in header.items())


def load_tensors(path):
    out = collections.OrderedDict()
    for name, (dtype, shape, raw) in read_safetensors(path).items():
        assert dtype == "F32", dtype
        out[name] = torch.from_numpy(np.frombuffer(raw, dtype="<f4").copy().reshape(shape))
    return out


def cases():
    return sorted(d for d in os.listdir(FAMILY) if os.path.isdir(os.path.join(FAMILY, d)))


class ExportFastTransformersTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def run_exporter(self, *args):
        p = subprocess.run([PYTHON, EXPORTER] + [str(a) for a in args], capture_output=True,
                           text=True)
        return p.returncode, p.stdout, p.stderr

    def save(self, name, obj):
        path = os.path.join(self.tmp.name, name)
        torch.save(obj, path)
        return path

    def fixture(self, case):
        with open(os.path.join(FAMILY, case, "config.json")) as f:
            config = json.load(f, object_pairs_hook=collections.OrderedDict)
        return config, load_tensors(os.path.join(FAMILY, case, "weights.safetensors"))

    def assert_same_folder(self, out, case):
        with open(os.path.join(out, "config.json")) as f, \
                open(os.path.join(FAMILY, case, "config.json")) as g:
            self.assertEqual(json.load(f), json.load(g))
        got = read_safetensors(os.path.join(out, "weights.safetensors"))
        want = read_safetensors(os.path.join(FAMILY, case, "weights.safetensors"))
        self.assertEqual(sorted(got), sorted(want))
        for name in want:
            self.assertEqual(got[name], want[name], name)

    def test_every_checkpoint_form_round_trips(self):
        for case in cases():
            config, weights = self.fixture(case)
            forms = {
                "dict": ([self.save(case + ".dict.pt", {"state_dict": weights, "config": config})],
                         []),
                "bare": ([self.save(case + ".bare.pt", weights)],
                         ["--config", os.path.join(FAMILY, case, "config.json")]),
                "wrapped": ([self.save(case + ".wrapped.pt", {
                    "model_state_dict": collections.OrderedDict(
                        ("module." + k, v) for k, v in weights.items()),
                    "hparams": config})], []),
            }
            for form, (checkpoint, extra) in forms.items():
                with self.subTest(case=case, form=form):
                    out = os.path.join(self.tmp.name, case + "." + form)
                    rc, _, err = self.run_exporter(*(checkpoint + [out] + extra))
                    self.assertEqual(rc, 0, err)
                    self.assert_same_folder(out, case)

    def test_dtype(self):
        config, weights = self.fixture(cases()[0])
        checkpoint = self.save("c.pt", {"state_dict": weights, "config": config})
        out = os.path.join(self.tmp.name, "bf16")
        rc, _, err = self.run_exporter(checkpoint, out, "--dtype", "bfloat16")
        self.assertEqual(rc, 0, err)
        self.assertEqual({v[0] for v in read_safetensors(
            os.path.join(out, "weights.safetensors")).values()}, {"BF16"})

    def test_validation_failures(self):
        config, weights = self.fixture("ftlm_causal_linear_favor")

        def attempt(label, cfg, tensors, message):
            checkpoint = self.save(label + ".pt", {"state_dict": tensors, "config": cfg})
            out = os.path.join(self.tmp.name, label)
            rc, _, err = self.run_exporter(checkpoint, out)
            self.assertEqual(rc, 2, err)
            self.assertIn(message, err)
            self.assertFalse(os.path.exists(out), "a failed export wrote " + out)

        missing = collections.OrderedDict(weights)
        del missing["encoder.layers.1.linear2.bias"]
        attempt("missing", config, missing, "missing keys: encoder.layers.1.linear2.bias")
        extra = collections.OrderedDict(weights, **{"encoder.layers.2.norm1.bias": torch.zeros(16)})
        attempt("extra", config, extra, "unexpected keys: encoder.layers.2.norm1.bias")
        shaped = collections.OrderedDict(weights)
        shaped["to_logits.bias"] = torch.zeros(41)
        attempt("shape", config, shaped, "to_logits.bias: [41], expected [40]")
        omega = collections.OrderedDict(weights)
        omega["encoder.layers.0.attention.inner_attention.feature_map.omega"] = torch.zeros(8, 16)
        attempt("omega", config, omega, "feature_map.omega: [8, 16], expected [8, 8]")
        nan = collections.OrderedDict(weights)
        nan["pos_emb.weight"] = torch.full((64, 16), float("nan"))
        attempt("nan", config, nan, "tensor 'pos_emb.weight' has non-finite values")
        attempt("class", dict(config, model_class="PerformerLM"), weights,
                "this exporter writes FastTransformersLM folders")
        attempt("tokens", dict(config, num_tokens=0), weights, "'num_tokens' must be a positive")
        attempt("unknown", dict(config, depth=3), weights, "unknown configuration keys: depth")
        encoder = dict(config["encoder"], feature_map={"type": "Softmax"})
        attempt("feature_map", dict(config, encoder=encoder), weights, "encoder.feature_map must")

    def test_no_configuration_and_overwrite(self):
        config, weights = self.fixture(cases()[0])
        bare = self.save("bare.pt", weights)
        rc, _, err = self.run_exporter(bare, os.path.join(self.tmp.name, "x"))
        self.assertEqual(rc, 2)
        self.assertIn("give --config", err)
        checkpoint = self.save("c.pt", {"state_dict": weights, "config": config})
        out = os.path.join(self.tmp.name, "once")
        self.assertEqual(self.run_exporter(checkpoint, out)[0], 0)
        rc, _, err = self.run_exporter(checkpoint, out)
        self.assertEqual(rc, 2)
        self.assertIn("--force", err)
        self.assertEqual(self.run_exporter(checkpoint, out, "--force")[0], 0)


if __name__ == "__main__":
    if not os.path.isdir(FAMILY) or not cases():
        print("error: fixture folder %s is missing from the checkout" % FAMILY, file=sys.stderr)
        sys.exit(1)
    unittest.main(verbosity=2)
