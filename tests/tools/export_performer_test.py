#!/usr/bin/python3
"""Tests of tools/export_performer.py against the golden performer fixtures.

Run: /usr/bin/python3 tests/tools/export_performer_test.py   (needs torch + numpy)
Fixtures: the repository's own, <repo>/tests/fixtures/performer (missing, the test fails).

For every fixture case, its config.json + weights.safetensors are turned into a checkpoint
{"state_dict", "config", "model_class"} saved with torch.save, exported again, and compared:
config.json equal as dicts, same tensor names in the same order, same dtypes, bit-identical data.
Also covered: --dtype float16/bfloat16, --drop-aliases, a bare state_dict with and without --config,
model-class inference, unknown keywords, overwrite protection, validation failures, --help. The
safetensors reader here is independent of the exporter's so that a writer bug cannot hide behind a
matching reader bug.
"""

import contextlib
import importlib.util
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTER = os.path.join(REPO, "tools", "export_performer.py")
FIXTURES = os.path.join(REPO, "tests", "fixtures")
FAMILY = os.path.join(FIXTURES, "performer")
PYTHON = sys.executable
ALIAS = "performer.proj_updater.instance."

_NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4",
       "U8": "u1", "BOOL": "u1"}


def read_st(path):
    """Independent safetensors reader. Returns (header dict without metadata, metadata,
    {name: (dtype, shape, raw bytes)}) and asserts the packing invariants."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])  # dicts keep file order
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    raw = {}
    pos = 0
    for name, info in header.items():
        b, e = info["data_offsets"]
        count = int(np.prod(info["shape"], dtype=np.int64))
        assert e - b == count * np.dtype(_NP[info["dtype"]]).itemsize, name
        raw[name] = (info["dtype"], list(info["shape"]), data[b:e])
        pos = max(pos, e)
    return header, meta, raw, n, len(data), pos


def to_torch(dtype, shape, raw):
    if dtype == "BF16":  # numpy has no bfloat16: reinterpret the raw 16-bit patterns
        return torch.from_numpy(np.frombuffer(raw, dtype="<i2").copy()).view(torch.bfloat16).reshape(shape)
    arr = np.frombuffer(raw, dtype=_NP[dtype]).astype(_NP[dtype].lstrip("<"))
    t = torch.from_numpy(arr.copy()).reshape(shape)
    return t.to(torch.bool) if dtype == "BOOL" else t


def load_weights(path):
    """OrderedDict-like {name: torch tensor} in file order."""
    _, _, raw, _, _, _ = read_st(path)
    return {k: to_torch(*v) for k, v in raw.items()}


def load_exporter():
    spec = importlib.util.spec_from_file_location("export_performer", EXPORTER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def case_names():
    return sorted(d for d in os.listdir(FAMILY)
                  if os.path.isfile(os.path.join(FAMILY, d, "config.json"))
                  and os.path.isfile(os.path.join(FAMILY, d, "weights.safetensors")))


class ExportPerformerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ep = load_exporter()
        cls.tmp = tempfile.mkdtemp(prefix="export_performer_test.")
        cls.cases = case_names()
        cls.orig = {}
        for c in cls.cases:
            d = os.path.join(FAMILY, c)
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            weights = load_weights(os.path.join(d, "weights.safetensors"))
            kw = {k: v for k, v in cfg.items() if k != "model_class"}
            pt = os.path.join(cls.tmp, c + ".pt")
            torch.save({"state_dict": weights, "config": kw, "model_class": cfg["model_class"]}, pt)
            cls.orig[c] = (cfg, weights, pt)
        # The few checks that need a real process start now and run beside the in-process ones.
        cls.procs = {}
        enc = "encdec_basic" if "encdec_basic" in cls.cases else cls.cases[0]
        cls.cli_case = enc
        cls.procs["roundtrip"] = cls.spawn([cls.orig[enc][2], os.path.join(cls.tmp, "cli_out")])
        bare = os.path.join(cls.tmp, "bare.pt")
        torch.save(cls.orig[enc][1], bare)
        cls.procs["bare"] = cls.spawn([bare, os.path.join(cls.tmp, "cli_bare_out")])
        cls.procs["help"] = cls.spawn(["--help"])

    @classmethod
    def spawn(cls, args):
        return subprocess.Popen([PYTHON, EXPORTER] + args, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, universal_newlines=True)

    @classmethod
    def tearDownClass(cls):
        for p in cls.procs.values():
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=30)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def proc(self, name):
        out, err = self.procs[name].communicate(timeout=120)
        return self.procs[name].returncode, out, err

    # -- helpers ----------------------------------------------------------------------------

    def run_export(self, *args):
        """Runs the exporter's main() in-process; returns (exit code, stderr text)."""
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                rc = self.ep.main([str(a) for a in args])
            except SystemExit as e:
                rc = e.code
        return rc, err.getvalue()

    def out_dir(self, name):
        return os.path.join(self.tmp, "out_" + name)

    def check_file_format(self, path):
        header, meta, raw, n, data_len, end = read_st(path)
        self.assertEqual(n % 8, 0, "header length must be a multiple of 8")
        self.assertEqual(data_len, end, "data section must hold exactly the tensors")
        pos = 0
        for name, info in header.items():  # packed in header order, no gaps
            self.assertEqual(info["data_offsets"][0], pos, name)
            pos = info["data_offsets"][1]
        self.assertEqual(meta, {"format": "performer-serve/1", "source": meta.get("source"),
                                "exporter": "export_performer.py"})
        return header, meta, raw

    def assert_same_export(self, case, out):
        cfg, _, _ = self.orig[case]
        with open(os.path.join(out, "config.json")) as f:
            self.assertEqual(json.load(f), cfg)
        _, meta, raw = self.check_file_format(os.path.join(out, "weights.safetensors"))
        _, _, oraw, _, _, _ = read_st(os.path.join(FAMILY, case, "weights.safetensors"))
        self.assertEqual(list(raw), list(oraw), "same keys in the same order")
        for k, (dt, shape, b) in oraw.items():
            self.assertEqual(raw[k][:2], (dt, shape), k)
            self.assertTrue(raw[k][2] == b, "%s: data not bit-identical" % k)
        return meta

    # -- round trips ------------------------------------------------------------------------

    def test_roundtrip_every_case(self):
        self.assertTrue(self.cases, "no fixture cases found in %s" % FAMILY)
        for c in self.cases:
            with self.subTest(case=c):
                out = self.out_dir("rt_" + c)
                rc, err = self.run_export(self.orig[c][2], out)
                self.assertEqual(rc, 0, err)
                meta = self.assert_same_export(c, out)
                self.assertEqual(meta["source"], c + ".pt")

    def test_roundtrip_cli(self):
        rc, out, err = self.proc("roundtrip")
        self.assertEqual(rc, 0, err)
        self.assert_same_export(self.cli_case, os.path.join(self.tmp, "cli_out"))

    def test_dtype_conversion(self):
        picks = [c for c in ("lm_causal_default", "encdec_basic", "fastattn_softmax_causal")
                 if c in self.cases] or self.cases[:1]
        for dtype, st, tdt, rtol in (("float16", "F16", torch.float16, 1e-3),
                                      ("bfloat16", "BF16", torch.bfloat16, 8e-3)):
            for c in picks:
                with self.subTest(case=c, dtype=dtype):
                    cfg, weights, pt = self.orig[c]
                    out = self.out_dir("%s_%s" % (dtype, c))
                    rc, err = self.run_export(pt, out, "--dtype", dtype)
                    self.assertEqual(rc, 0, err)
                    with open(os.path.join(out, "config.json")) as f:
                        self.assertEqual(json.load(f), cfg)
                    _, _, raw = self.check_file_format(os.path.join(out, "weights.safetensors"))
                    self.assertEqual(list(raw), list(weights))
                    for k, t in weights.items():
                        got = to_torch(*raw[k])
                        if t.is_floating_point():
                            self.assertEqual(raw[k][0], st, k)
                            self.assertTrue(torch.equal(got, t.to(tdt)), k)
                            self.assertTrue(torch.allclose(got.float(), t, rtol=rtol, atol=1e-6), k)
                        else:
                            self.assertEqual(raw[k][0], "I64", k)
                            self.assertTrue(torch.equal(got, t), k)

    def test_drop_aliases(self):
        c = "lm_causal_default" if "lm_causal_default" in self.cases else self.cases[0]
        _, weights, pt = self.orig[c]
        rc, err = self.run_export(pt, self.out_dir("noalias"), "--drop-aliases")
        self.assertEqual(rc, 0, err)
        got = load_weights(os.path.join(self.out_dir("noalias"), "weights.safetensors"))
        expect = [k for k in weights if ALIAS not in k]
        self.assertEqual(list(got), expect)
        if any(ALIAS in k for k in weights):
            self.assertLess(len(got), len(weights))

    # -- checkpoint layouts -----------------------------------------------------------------

    def test_bare_state_dict_needs_config(self):
        rc, _, err = self.proc("bare")
        self.assertEqual(rc, 2, err)
        self.assertIn("--config", err)
        self.assertIn("missing required", err)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "cli_bare_out", "config.json")))

    def test_bare_state_dict_with_config_and_inferred_class(self):
        for c in self.cases:
            with self.subTest(case=c):
                cfg, weights, _ = self.orig[c]
                bare = os.path.join(self.tmp, "bare_%s.pt" % c)
                torch.save(weights, bare)
                conf = os.path.join(self.tmp, "kw_%s.json" % c)
                with open(conf, "w") as f:  # no model_class: inferred from the key names
                    json.dump({k: v for k, v in cfg.items() if k != "model_class"}, f)
                out = self.out_dir("bare_" + c)
                rc, err = self.run_export(bare, out, "--config", conf)
                self.assertEqual(rc, 0, err)
                self.assert_same_export(c, out)

    def test_config_file_wins_and_defaults_filled(self):
        c = "lm_causal_default"
        if c not in self.cases:
            self.skipTest(c + " absent")
        cfg, weights, _ = self.orig[c]
        pt = os.path.join(self.tmp, "minimal.pt")
        # Only the required keywords plus the non-default ones; one wrong value fixed by --config.
        kw = {"num_tokens": 100, "max_seq_len": 48, "dim": 32, "depth": 2, "heads": 2,
              "causal": False, "kernel_fn": torch.nn.ReLU()}
        torch.save({"model_state_dict": weights, "hparams": kw}, pt)
        conf = os.path.join(self.tmp, "fix.json")
        with open(conf, "w") as f:
            json.dump({"causal": True}, f)
        rc, err = self.run_export(pt, self.out_dir("minimal"), "--config", conf)
        self.assertEqual(rc, 0, err)
        self.assert_same_export(c, self.out_dir("minimal"))

    # -- errors -----------------------------------------------------------------------------

    def test_unknown_keyword_fails(self):
        c = "lm_causal_default" if "lm_causal_default" in self.cases else self.cases[0]
        cfg, weights, _ = self.orig[c]
        kw = {k: v for k, v in cfg.items() if k != "model_class"}
        kw["bogus_keyword"] = 3
        pt = os.path.join(self.tmp, "unknown.pt")
        torch.save({"state_dict": weights, "config": kw, "model_class": cfg["model_class"]}, pt)
        rc, err = self.run_export(pt, self.out_dir("unknown"))
        self.assertEqual(rc, 2)
        self.assertIn("bogus_keyword", err)
        self.assertFalse(os.path.exists(self.out_dir("unknown")))

    def test_encdec_keywords(self):
        c = "encdec_basic"
        if c not in self.cases:
            self.skipTest(c + " absent")
        cfg, weights, _ = self.orig[c]
        kw = {k: v for k, v in cfg.items() if k != "model_class"}
        pt = os.path.join(self.tmp, "encdec_kw.pt")
        # An unprefixed unknown keyword is dropped by the library: warning, export succeeds.
        torch.save({"state_dict": weights, "config": dict(kw, tie_token_embed=True)}, pt)
        rc, err = self.run_export(pt, self.out_dir("encdec_warn"))
        self.assertEqual(rc, 0, err)
        self.assertIn("tie_token_embed", err)
        self.assert_same_export(c, self.out_dir("encdec_warn"))
        # A prefixed unknown keyword is an error naming it.
        torch.save({"state_dict": weights, "config": dict(kw, enc_bogus=1)}, pt)
        rc, err = self.run_export(pt, self.out_dir("encdec_bad"))
        self.assertEqual(rc, 2)
        self.assertIn("enc_bogus", err)
        # The decoder is forced causal with cross-attention, as in the library.
        kw2 = {k: v for k, v in kw.items() if k not in ("dec_causal", "dec_cross_attend")}
        torch.save({"state_dict": weights, "config": kw2}, pt)
        rc, err = self.run_export(pt, self.out_dir("encdec_forced"))
        self.assertEqual(rc, 0, err)
        self.assert_same_export(c, self.out_dir("encdec_forced"))

    def test_overwrite_needs_force(self):
        c = self.cases[0]
        out = self.out_dir("overwrite")
        rc, err = self.run_export(self.orig[c][2], out)
        self.assertEqual(rc, 0, err)
        rc, err = self.run_export(self.orig[c][2], out, "--dtype", "float16")
        self.assertEqual(rc, 2)
        self.assertIn("--force", err)
        self.assert_same_export(c, out)  # untouched
        rc, err = self.run_export(self.orig[c][2], out, "--force")
        self.assertEqual(rc, 0, err)
        self.assert_same_export(c, out)

    def test_validation_failures(self):
        c = "lm_causal_default"
        if c not in self.cases:
            self.skipTest(c + " absent")
        cfg, weights, _ = self.orig[c]
        kw = {k: v for k, v in cfg.items() if k != "model_class"}

        def attempt(name, kw2, w2, *expect):
            pt = os.path.join(self.tmp, "bad_%s.pt" % name)
            torch.save({"state_dict": w2, "config": kw2, "model_class": "PerformerLM"}, pt)
            rc, err = self.run_export(pt, self.out_dir("bad_" + name))
            self.assertEqual(rc, 2, "%s: %s" % (name, err))
            for e in expect:
                self.assertIn(e, err, name)
            self.assertFalse(os.path.exists(self.out_dir("bad_" + name)), name)

        with self.subTest("dim % heads"):
            attempt("heads", dict(kw, heads=3), weights, "divisible by heads")
        with self.subTest("heads vs dim_head split"):
            attempt("split", dict(kw, dim_head=32), weights, "to_q.weight", "shape")
        with self.subTest("missing key"):
            w2 = {k: v for k, v in weights.items() if k != "token_emb.weight"}
            attempt("missing", kw, w2, "token_emb.weight")
        with self.subTest("non-finite"):
            w2 = dict(weights)
            w2["norm.weight"] = w2["norm.weight"].clone()
            w2["norm.weight"][0] = float("nan")
            attempt("nan", kw, w2, "norm.weight", "non-finite")
        with self.subTest("missing required keyword"):
            attempt("required", {k: v for k, v in kw.items() if k != "max_seq_len"}, weights,
                    "max_seq_len")
        with self.subTest("bad kernel"):
            attempt("kernel", dict(kw, kernel_fn="NoSuchActivation"), weights, "NoSuchActivation")

    def test_help(self):
        rc, out, err = self.proc("help")
        self.assertEqual(rc, 0, err)
        self.assertIn("CHECKPOINT.pt", out)
        self.assertIn("--drop-aliases", out)


if __name__ == "__main__":
    if not os.path.isdir(FAMILY):
        print("error: fixture folder %s is missing from the checkout" % FAMILY, file=sys.stderr)
        sys.exit(1)
    unittest.main(verbosity=2)
