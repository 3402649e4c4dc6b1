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
* sessions written to --state_spill_dir at SIGTERM continue in a new server;
* performer-client: generate --create_session / --session, export --out,
  delete, import --in, and its usage errors.
"""

import json
import os
import re
import signal
import subprocess
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


def client_binary():
    return os.environ.get("PERFORMER_CLIENT") or os.path.join(harness.REPO, "build", "tools",
                                                              "performer-client")


def run_client(server, *args):
    """performer-client against `server`; its stdout and stderr as text."""
    return subprocess.run([client_binary(), "--server=" + server.address, "--timeout=60s"]
                          + list(args), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def generate(stub, prompt, max_new, session_id="", seed=None, timeout=120, create=False):
    request = pb.GenerateRequest(model=MODEL, max_new_tokens=max_new, session_id=session_id,
                                 create_session=create)
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
        one = generate(self.cached.stub, turn1, 40, session_id="history-test", create=True)
        two = generate(self.cached.stub, turn2, 40, session_id="history-test")
        seen = len(turn1) + len(one.token_ids)
        self.assertEqual(one.session_position, seen)
        # The history counts as prompt, served from the state.
        self.assertEqual(two.usage.prompt_tokens, seen + len(turn2))
        self.assertEqual(two.usage.cached_prompt_tokens, seen - 1)
        self.assertEqual(two.session_position, seen + len(turn2) + len(two.token_ids))
        whole = generate(self.cold.stub, turn1 + bytes(one.token_ids) + turn2, 40)
        self.assertEqual(list(two.token_ids), list(whole.token_ids))

    def test_export_delete_import_continues_the_session(self):
        stub = self.cached.stub
        for sid in ("uninterrupted", "moved"):
            generate(stub, b"Knock knock.\n", 12, session_id=sid, create=True)
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
        generate(stub, b"Hello", 4, session_id="to-corrupt", create=True)
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

    def test_with_a_signing_key_only_this_deployments_states_are_imported(self):
        key = os.path.join(harness.make_temp_dir("key"), "state.key")
        with open(key, "w") as f:
            f.write("k" * 48 + "\n")
        flags = ("--prefill_chunk_tokens=256", "--state_signing_key_file=" + key)
        signer = self.start(flags, "signer")
        verifier = self.start(flags, "verifier")
        generate(signer.stub, b"Knock knock.\n", 8, session_id="signed", create=True)
        generate(self.cold.stub, b"Knock knock.\n", 8, session_id="unsigned", create=True)
        signed = signer.stub.ExportSession(
            pb.ExportSessionRequest(model=MODEL, session_id="signed"), timeout=30).data
        unsigned = self.cold.stub.ExportSession(
            pb.ExportSessionRequest(model=MODEL, session_id="unsigned"), timeout=30).data
        with self.assertRaises(grpc.RpcError) as refused:
            verifier.stub.ImportSession(
                pb.ImportSessionRequest(model=MODEL, session_id="x", data=unsigned), timeout=30)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("not signed", refused.exception.details())
        verifier.stub.ImportSession(
            pb.ImportSessionRequest(model=MODEL, session_id="signed", data=signed), timeout=30)
        moved = generate(verifier.stub, b"Who's there?\n", 12, session_id="signed")
        kept = generate(signer.stub, b"Who's there?\n", 12, session_id="signed")
        self.assertEqual(list(moved.token_ids), list(kept.token_ids))

    def test_sessions_survive_a_restart_through_the_spill_folder(self):
        spill = harness.make_temp_dir("spill")
        first = self.start(("--prefill_chunk_tokens=256",), "spill-a", spill_dir=spill)
        generate(first.stub, b"Once upon a time", 10, session_id="story", create=True)
        generate(self.cold.stub, b"Once upon a time", 10, session_id="story-twin", create=True)
        self.assertEqual(first.stop(), 0)
        self.assertTrue(os.listdir(os.path.join(spill, MODEL)), "nothing spilled")
        second = self.start(("--prefill_chunk_tokens=256",), "spill-b", spill_dir=spill)
        resumed = generate(second.stub, b" there was", 12, session_id="story")
        twin = generate(self.cold.stub, b" there was", 12, session_id="story-twin")
        self.assertEqual(list(resumed.token_ids), list(twin.token_ids))

    def client_turn(self, prompt, max_new, *flags):
        """A greedy performer-client generate --json on the cached server:
        (its tokens, the largest session_position of its messages, the
        session_position of its summary line)."""
        result = run_client(self.cached, "--json", "generate", "--model=" + MODEL,
                            "--temperature=0", "--max_new_tokens=%d" % max_new,
                            "--tokens=" + ",".join(str(b) for b in prompt), *flags)
        self.assertEqual(result.returncode, 0, result.stderr)
        messages = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        self.assertTrue(messages, result.stdout)
        tokens = [t for m in messages for t in m.get("token_ids", [])]
        # int64 is a JSON string in proto3's mapping.
        position = max(int(m.get("session_position", "0")) for m in messages)
        summary = re.search(r" session=(\S+) session_position=(\d+)", result.stderr)
        self.assertIsNotNone(summary, result.stderr)
        return tokens, position, summary.group(1), int(summary.group(2))

    def test_performer_client_sessions_export_delete_import(self):
        sid = "client-chat"
        turn1, turn2, turn3 = b"Knock knock.\n", b"Who's there?\n", b"Lettuce.\n"
        session = "--session=" + sid

        one, pos1, summary_sid, summary_pos = self.client_turn(turn1, 12, session,
                                                               "--create_session")
        self.assertTrue(one)
        self.assertEqual(summary_sid, sid)
        self.assertEqual(pos1, len(turn1) + len(one))
        self.assertEqual(summary_pos, pos1)
        two, pos2, _, summary_pos = self.client_turn(turn2, 12, session)
        self.assertTrue(two)
        self.assertEqual(pos2, pos1 + len(turn2) + len(two))
        self.assertEqual(summary_pos, pos2)

        # Starting it again is refused, and leaves the session as it was.
        again = run_client(self.cached, "generate", "--model=" + MODEL, "--max_new_tokens=1",
                           "--tokens=1", session, "--create_session")
        self.assertEqual(again.returncode, 1, again.stderr)
        self.assertIn("error: ALREADY_EXISTS", again.stderr)

        state_file = os.path.join(harness.make_temp_dir("client-session"), "chat.state")
        exported = run_client(self.cached, "export", session, "--model=" + MODEL,
                              "--out=" + state_file)
        self.assertEqual(exported.returncode, 0, exported.stderr)
        described = re.search(r"exported session=(\S+) model=(\S+) position=(\d+) tokens=(\d+) "
                              r"bytes=(\d+) to ", exported.stderr)
        self.assertIsNotNone(described, exported.stderr)
        self.assertEqual(described.group(1), sid)
        self.assertEqual(described.group(2), MODEL)
        self.assertEqual(int(described.group(4)), pos2)
        exported_position = int(described.group(3))
        self.assertIn(exported_position, (pos2 - 1, pos2))
        with open(state_file, "rb") as f:
            data = f.read()
        self.assertEqual(len(data), int(described.group(5)))
        # The same bytes as the API gives.
        state = self.cached.stub.ExportSession(
            pb.ExportSessionRequest(model=MODEL, session_id=sid), timeout=30)
        self.assertEqual(data, state.data)

        deleted = run_client(self.cached, "delete", session, "--model=" + MODEL)
        self.assertEqual(deleted.returncode, 0, deleted.stderr)
        self.assertEqual(deleted.stdout.strip(), "deleted session=%s" % sid)
        gone = run_client(self.cached, "generate", "--model=" + MODEL, "--temperature=0",
                          "--max_new_tokens=4", "--tokens=" + ",".join(str(b) for b in turn3),
                          session)
        self.assertEqual(gone.returncode, 1, gone.stderr)
        self.assertIn("error: NOT_FOUND", gone.stderr)
        self.assertEqual(gone.stdout, "")

        imported = run_client(self.cached, "import", session, "--model=" + MODEL,
                              "--in=" + state_file)
        self.assertEqual(imported.returncode, 0, imported.stderr)
        self.assertEqual(imported.stdout.strip(),
                         "imported session=%s position=%d" % (sid, exported_position))

        three, pos3, _, _ = self.client_turn(turn3, 16, session)
        self.assertEqual(pos3, pos2 + len(turn3) + len(three))
        whole = generate(self.cold.stub, turn1 + bytes(one) + turn2 + bytes(two) + turn3, 16)
        self.assertEqual(three, list(whole.token_ids))

    def test_performer_client_session_usage_errors(self):
        work = harness.make_temp_dir("client-usage")
        too_big = os.path.join(work, "too-big.state")
        with open(too_big, "wb") as f:
            f.truncate((1 << 30) + 1)  # sparse: no disk is used
        missing = os.path.join(work, "missing.state")
        cases = [
            (("export", "--out=" + missing), "export needs --session=ID"),
            (("import", "--in=" + too_big), "import needs --session=ID"),
            (("delete",), "delete needs --session=ID"),
            (("export", "--session=s"), "export needs --out=FILE"),
            (("import", "--session=s"), "import needs --in=FILE"),
            (("--json", "export", "--session=s", "--out=-"), "give --out=FILE"),
            (("delete", "--session=s", "extra"), "delete takes no arguments"),
            (("generate", "--create_session", "--tokens=1"), "--create_session needs --session"),
            (("list", "--session=s"), "--session only applies to"),
            (("import", "--session=s", "--create_session", "--in=" + missing),
             "--create_session only applies to generate"),
            (("generate", "--session=s", "--out=" + missing, "--tokens=1"),
             "--out only applies to export"),
            (("delete", "--session=tab\there"), "printable ASCII"),
            (("delete", "--session= padded"), "must not begin or end with a space"),
            (("import", "--session=s", "--in=" + missing), "cannot read " + missing),
            (("import", "--session=s", "--in=" + too_big), "holds more than 1 GiB"),
        ]
        for args, message in cases:
            result = run_client(self.cached, *args)
            self.assertEqual(result.returncode, 2, (args, result.stderr))
            self.assertIn(message, result.stderr, args)
        self.assertFalse(os.path.exists(missing))


if __name__ == "__main__":
    unittest.main()
