"""Reusing the recurrent state through a real client, on the repository's
default model (the done-when of the state features):

* a repeated 1,400-token prompt reports cached_prompt_tokens >= its length
  - 1, gets its first token in under a third of the cold time, with the
  same tokens; the prefix-cache hit counter is non-zero;
* a prompt that extends a cached one resumes from it and gives what a server
  with --prefix_cache_bytes=0 gives;
* two turns of a session give the tokens of the whole history sent at once;
* export -> delete -> import -> continue equals the uninterrupted session;
* a corrupted state is refused (INVALID_ARGUMENT) and the server serves on;
* sessions written to --state_spill_dir at SIGTERM continue in a new server.
"""

import os
import signal
import unittest

import grpc

import harness
from harness import pb

REPO_MODELS = os.path.join(harness.REPO, "models")
MODEL = "performer-fortunes"
TEXT = ("Q: What do you get when you cross a computer with an elephant? "
        "A: Lots of memory, and a very large mouse pad. ")


def long_prompt(length, salt=""):
    """`length` bytes of text; prompts with another salt share no prefix."""
    text = salt + TEXT
    return (text * (length // len(text) + 1))[:length].encode()


def generate(stub, prompt, max_new, session_id="", seed=None, timeout=120):
    request = pb.GenerateRequest(model=MODEL, max_new_tokens=max_new, session_id=session_id)
    request.prompt_tokens.ids.extend(prompt)
    if seed is None:
        request.temperature = 0.0
    else:
        request.temperature = 0.8
        request.seed = seed
    return stub.Generate(request, timeout=timeout)


class StateReuseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.servers = []
        # Both servers prefill in chunks of 256, so their chunk boundaries
        # (and so their tokens) are the same.
        cls.cached = cls.start(("--prefix_cache_bytes=268435456", "--prefill_chunk_tokens=256"),
                               "cached", metrics=True)
        cls.cold = cls.start(("--prefix_cache_bytes=0", "--prefill_chunk_tokens=256"), "cold")

    @classmethod
    def start(cls, flags, name, metrics=False, spill_dir=None):
        flags = ("--max_batch=4",) + tuple(flags)
        if spill_dir is not None:
            flags += ("--state_spill_dir=%s" % spill_dir,)
        server = (harness.MetricsServer if metrics else harness.Server)(REPO_MODELS, flags, name=name)
        cls.servers.append(server)
        server.start()
        return server

    @classmethod
    def tearDownClass(cls):
        for server in cls.servers:
            server.stop()

    def test_repeated_long_prompt_is_served_from_the_cache(self):
        prompt = long_prompt(1400, salt="Repeated. ")
        cold = generate(self.cached.stub, prompt, 16)
        warm = generate(self.cached.stub, prompt, 16)
        self.assertEqual(list(warm.token_ids), list(cold.token_ids))
        self.assertEqual(cold.usage.cached_prompt_tokens, 0)
        self.assertGreaterEqual(warm.usage.cached_prompt_tokens, len(prompt) - 1)
        cold_ttft = cold.timings.time_to_first_token_seconds
        warm_ttft = warm.timings.time_to_first_token_seconds
        self.assertLess(warm_ttft, cold_ttft / 3,
                        "first token after %.1f ms cached vs %.1f ms cold"
                        % (warm_ttft * 1e3, cold_ttft * 1e3))
        samples = self.cached.metrics()
        hits = harness.metric_values(samples, "performer_prefix_cache_hits_total", model=MODEL)
        self.assertTrue(hits and hits[0] >= 1, "hit counter: %s" % hits)
        tokens = harness.metric_values(samples, "performer_prefix_cache_cached_tokens_total",
                                       model=MODEL)
        self.assertTrue(tokens and tokens[0] >= 1400, tokens)

    def test_an_extended_prompt_equals_a_server_without_cache(self):
        base = long_prompt(900)
        generate(self.cached.stub, base, 4)
        for extra in (b" Q: And a mouse?", b" And then?" * 30):
            prompt = base + extra
            for seed in (None, 7):
                got = generate(self.cached.stub, prompt, 24, seed=seed)
                want = generate(self.cold.stub, prompt, 24, seed=seed)
                self.assertEqual(list(got.token_ids), list(want.token_ids), (len(extra), seed))
                # Resumed from the base's chunk boundary at 768, at least.
                self.assertGreaterEqual(got.usage.cached_prompt_tokens, 768)
                self.assertEqual(want.usage.cached_prompt_tokens, 0)

    def test_two_turns_equal_the_whole_history(self):
        turn1 = b"Q: Why is the sky blue?\nA:"
        turn2 = b"\nQ: Are you sure?\nA:"
        one = generate(self.cached.stub, turn1, 40, session_id="history-test")
        two = generate(self.cached.stub, turn2, 40, session_id="history-test")
        self.assertEqual(two.usage.prompt_tokens, len(turn2))
        whole = generate(self.cold.stub, turn1 + bytes(one.token_ids) + turn2, 40)
        self.assertEqual(list(two.token_ids), list(whole.token_ids))

    def test_export_delete_import_continues_the_session(self):
        stub = self.cached.stub
        for sid in ("uninterrupted", "moved"):
            generate(stub, b"Knock knock.\n", 12, session_id=sid)
        state = stub.ExportSession(pb.ExportSessionRequest(model=MODEL, session_id="moved"),
                                   timeout=30)
        self.assertEqual(state.tokens, 13 + 12)
        stub.DeleteSession(pb.DeleteSessionRequest(model=MODEL, session_id="moved"), timeout=30)
        with self.assertRaises(grpc.RpcError) as gone:
            stub.ExportSession(pb.ExportSessionRequest(model=MODEL, session_id="moved"), timeout=30)
        self.assertEqual(gone.exception.code(), grpc.StatusCode.NOT_FOUND)
        # Into the other server (another replica of the same model).
        imported = self.cold.stub.ImportSession(
            pb.ImportSessionRequest(model=MODEL, session_id="moved", data=state.data), timeout=30)
        self.assertEqual(imported.position, state.position)
        moved = generate(self.cold.stub, b"Who's there?\n", 20, session_id="moved", seed=3)
        kept = generate(stub, b"Who's there?\n", 20, session_id="uninterrupted", seed=3)
        self.assertEqual(list(moved.token_ids), list(kept.token_ids))

    def test_a_corrupted_state_is_refused_and_the_server_serves_on(self):
        stub = self.cached.stub
        generate(stub, b"Hello", 4, session_id="to-corrupt")
        data = bytearray(stub.ExportSession(
            pb.ExportSessionRequest(model=MODEL, session_id="to-corrupt"), timeout=30).data)
        data[len(data) // 2] ^= 0xFF
        for bad in (bytes(data), bytes(data[:100]), b""):
            with self.assertRaises(grpc.RpcError) as refused:
                stub.ImportSession(pb.ImportSessionRequest(model=MODEL, session_id="bad",
                                                           data=bad), timeout=30)
            self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(len(generate(stub, b"Still here?", 5).token_ids), 5)
        self.assertEqual(len(generate(stub, b" Yes.", 5, session_id="to-corrupt").token_ids), 5)

    def test_sessions_survive_a_restart_through_the_spill_folder(self):
        spill = harness.make_temp_dir("spill")
        first = self.start(("--prefill_chunk_tokens=256",), "spill-a", spill_dir=spill)
        generate(first.stub, b"Once upon a time", 10, session_id="story")
        generate(self.cold.stub, b"Once upon a time", 10, session_id="story-twin")
        self.assertEqual(first.stop(), 0)
        self.assertTrue(os.listdir(os.path.join(spill, MODEL)), "nothing spilled")
        second = self.start(("--prefill_chunk_tokens=256",), "spill-b", spill_dir=spill)
        resumed = generate(second.stub, b" there was", 12, session_id="story")
        twin = generate(self.cold.stub, b" there was", 12, session_id="story-twin")
        self.assertEqual(list(resumed.token_ids), list(twin.token_ids))


if __name__ == "__main__":
    unittest.main()
