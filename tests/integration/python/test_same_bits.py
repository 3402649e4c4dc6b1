"""The same bits however a sequence is fed (docs/serving.md), through the
real server on three models: the repository's default model (local and
FAVOR+ heads), a FAVOR+ PerformerLM (the bench model's layout, random
weights, written by serve_bench --make_bench_model) and fast-transformers'
causal linear attention with its Favor feature map (a fixture). For each,
the logprobs of a greedy continuation are compared bit for bit with those of
the same prompt sent alone to a server without prefix cache:

1. the prompt among 31 other requests at once;
2. resumed from a cached prefix whose length is not a multiple of anything;
3. the second turn of a session and one request with the whole history;
4. a session exported after its first turn, imported into a server with
   other prefill chunks, and continued;
5. prefill chunks of 16, 64 and 512 tokens (one server each).

And a 1,400-token prompt extended by 37 tokens reports 1,400 cached tokens.

With PERFORMER_SAME_BITS_DEVICE=cuda (tools/gpu_check.sh on the GPU
machine) every server runs with --device=cuda --cuda_same_bits, on the same
three models.
"""

import os
import shutil
import struct
import subprocess
import threading
import unittest

import harness
from harness import pb

CHUNKS = (16, 64, 512)
DEVICE = os.environ.get("PERFORMER_SAME_BITS_DEVICE", "cpu")
DEVICE_FLAGS = ("--device=cuda", "--cuda_same_bits") if DEVICE == "cuda" else ()


def bench_binary():
    return os.path.join(os.path.dirname(os.path.dirname(harness.server_binary())), "bench",
                        "serve_bench")


def make_repository():
    """The three models in one temporary repository: name -> (vocab, positions)."""
    repo = harness.make_temp_dir("same-bits")
    shutil.copytree(os.path.join(harness.REPO, "models", "performer-fortunes"),
                    os.path.join(repo, "default"))
    subprocess.run([bench_binary(), "--make_bench_model=" + os.path.join(repo, "favor"),
                    "--bench_dim=64", "--bench_depth=2", "--bench_heads=4",
                    "--bench_dim_head=16", "--bench_nb_features=32"],
                   check=True, capture_output=True, timeout=120)
    models = {"default": (256, 2048), "favor": (256, 2048)}
    ft = os.path.join(repo, "ft")
    os.makedirs(ft)
    src = os.path.join(harness.fixtures_root(), "fast_transformers_lm",
                       "ftlm_causal_linear_favor")
    for name in ("config.json", "weights.safetensors"):
        shutil.copyfile(os.path.join(src, name), os.path.join(ft, name))
    models["ft"] = (40, 64)
    return repo, models


def tokens(length, vocab, salt):
    return [(i * 37 + salt * 11 + 5) % vocab for i in range(length)]


def bits(values):
    """The float32 bit patterns of `values` (logprobs compare exactly)."""
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in values]


class SameBitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo, cls.models = make_repository()
        cls.servers = []
        common = ("--max_batch=40", "--max_queue=64") + DEVICE_FLAGS
        cls.by_chunk = {}
        for chunk in CHUNKS:
            cls.by_chunk[chunk] = cls.start(common + ("--prefill_chunk_tokens=%d" % chunk,),
                                            "chunk%d" % chunk)
        cls.cold = cls.start(common + ("--prefix_cache_bytes=0",), "cold")

    @classmethod
    def start(cls, flags, name):
        server = harness.Server(cls.repo, flags, name=name)
        cls.servers.append(server)
        server.start()
        return server

    @classmethod
    def tearDownClass(cls):
        for server in cls.servers:
            server.stop()
        shutil.rmtree(cls.repo, ignore_errors=True)

    def generate(self, server, model, prompt, max_new=8, session_id="", create=False):
        request = pb.GenerateRequest(model=model, max_new_tokens=max_new, temperature=0.0,
                                     return_logprobs=True, ignore_eos=True,
                                     session_id=session_id, create_session=create)
        request.prompt_tokens.ids.extend(prompt)
        response = server.stub.Generate(request, timeout=120)
        self.assertEqual(len(response.logprobs), max_new, (model, len(prompt)))
        return list(response.token_ids), bits(response.logprobs), response

    def alone(self, model, prompt, max_new=8):
        return self.generate(self.cold, model, prompt, max_new)[:2]

    def sizes(self, model):
        """A prompt length and a cached prefix length for `model`."""
        _, positions = self.models[model]
        return (45, 29) if positions < 100 else (700, 437)

    def test_prefill_chunks_do_not_change_a_bit(self):
        for model, (vocab, _) in self.models.items():
            prompt = tokens(self.sizes(model)[0], vocab, 1)
            want = self.alone(model, prompt)
            for chunk, server in self.by_chunk.items():
                got = self.generate(server, model, prompt)[:2]
                self.assertEqual(got, want, (model, chunk))

    def test_batch_companions_do_not_change_a_bit(self):
        for model, (vocab, _) in self.models.items():
            length = self.sizes(model)[0]
            prompts = [tokens(length - (i % 7), vocab, 100 + i) for i in range(32)]
            want = self.alone(model, prompts[0])
            results = [None] * 32

            def run(i):
                results[i] = self.generate(self.by_chunk[64], model, prompts[i])[:2]

            threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=300)
            self.assertEqual(results[0], want, model)

    def test_a_cached_prefix_of_any_length_does_not_change_a_bit(self):
        for model, (vocab, _) in self.models.items():
            length, cached = self.sizes(model)
            prompt = tokens(length, vocab, 2)
            server = self.by_chunk[16]
            self.generate(server, model, prompt[:cached], max_new=1)
            ids, logprobs, response = self.generate(server, model, prompt)
            self.assertEqual(response.usage.cached_prompt_tokens, cached, model)
            self.assertEqual((ids, logprobs), self.alone(model, prompt), model)

    def test_a_session_turn_equals_the_whole_history(self):
        for model, (vocab, _) in self.models.items():
            turn1, turn2 = tokens(20, vocab, 3), tokens(9, vocab, 4)
            server = self.by_chunk[64]
            one, _, _ = self.generate(server, model, turn1, session_id="s-" + model, create=True)
            two = self.generate(server, model, turn2, session_id="s-" + model)[:2]
            self.assertEqual(two, self.alone(model, turn1 + one + turn2), model)

    def test_an_imported_session_continues_bit_for_bit(self):
        for model, (vocab, _) in self.models.items():
            turn1, turn2 = tokens(21, vocab, 5), tokens(8, vocab, 6)
            source, target = self.by_chunk[512], self.by_chunk[16]
            sid = "moved-" + model
            self.generate(source, model, turn1, session_id=sid, create=True)
            state = source.stub.ExportSession(pb.ExportSessionRequest(model=model,
                                                                      session_id=sid),
                                              timeout=30)
            target.stub.ImportSession(pb.ImportSessionRequest(model=model, session_id=sid,
                                                              data=state.data), timeout=30)
            moved = self.generate(target, model, turn2, session_id=sid)[:2]
            kept = self.generate(source, model, turn2, session_id=sid)[:2]
            self.assertEqual(moved, kept, model)

    def test_a_long_prompt_extended_by_37_reports_its_whole_cached_length(self):
        prompt = tokens(1400 + 37, 256, 7)
        server = self.by_chunk[512]
        self.generate(server, "default", prompt[:1400], max_new=1)
        ids, logprobs, response = self.generate(server, "default", prompt)
        self.assertEqual(response.usage.cached_prompt_tokens, 1400)
        self.assertEqual((ids, logprobs), self.alone("default", prompt))


if __name__ == "__main__":
    unittest.main()
