"""Start-up against hostile model folders: the real performer-serve, a
crafted folder in a temporary repository, every run bounded in time.

A folder that fails to load never crashes or hangs the process: without
--skip_bad_models the server exits 1 naming the folder and the reason; with
it, the good models are served and the bad one is logged and counted. No
loadable model at all is exit 1 either way. SIGTERM while the models load
ends the process at once (128 + 15) with a log line.
"""

import json
import os
import signal
import struct
import subprocess
import time
import unittest
import urllib.request

import harness
from performer.v1 import generation_pb2 as pb

CASE = "lm_causal_default"  # num_tokens 100
# A start that fails must end well within this (the fixtures load in well
# under a second; an instrumented build is slower).
EXIT_TIMEOUT_S = float(os.environ.get("PERFORMER_STARTUP_TIMEOUT", "120"))


def write_safetensors(path, header, data=b""):
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


class StartupRun:
    """One performer-serve run that is expected to end by itself."""

    def __init__(self, repository_dir, flags=()):
        self.workdir = harness.make_temp_dir("loading")
        self.log_path = os.path.join(self.workdir, "server.log")
        self.command = [harness.server_binary(),
                        "--model_repository=%s" % repository_dir,
                        "--host=127.0.0.1", "--port=0",
                        "--port_file=%s" % os.path.join(self.workdir, "port"),
                        "--metrics_port=-1"] + list(flags)
        self.log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                     stdout=self.log_file, stderr=subprocess.STDOUT,
                                     preexec_fn=harness._die_with_parent)

    def wait(self, timeout=EXIT_TIMEOUT_S):
        """The exit status; kills the process and fails if it is still running."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=harness.KILL_WAIT_S)
            raise AssertionError("performer-serve still running after %.0f s (hung):\n%s"
                                 % (timeout, self.log()))
        finally:
            self.log_file.close()
            harness.assert_no_sanitizer_report(self.log(), "start-up run")

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


class LoadingTest(unittest.TestCase):

    def repository(self, *cases):
        repo = harness.ModelRepository("loading")
        for case in cases:
            repo.add(CASE, name=case)
        return repo

    def assertRefused(self, repo_dir, *expected, flags=()):
        """The server exits 1 (not an abort, not a hang) and logs `expected`."""
        run = StartupRun(repo_dir, flags)
        code = run.wait()
        log = run.log()
        self.assertEqual(code, 1, "exit status %s:\n%s" % (code, log))
        for text in expected:
            self.assertIn(text, log)
        return log

    def test_overflowing_safetensors_entry_is_refused(self):
        repo = self.repository("bad")
        weights = os.path.join(repo.dir, "bad", "weights.safetensors")
        write_safetensors(weights, {"w": {"dtype": "F32", "shape": [2 ** 31, 2 ** 31],
                                          "data_offsets": [0, 0]}}, b"\0" * (1 << 20))
        self.assertRefused(repo.dir, weights, "tensor 'w'", "2^64 bytes")

    def test_unbounded_config_values_are_refused(self):
        for key, value in (("max_seq_len", 2 ** 62), ("depth", 10 ** 9)):
            with self.subTest(key=key):
                repo = self.repository("bad")
                path = os.path.join(repo.dir, "bad", "config.json")
                config = harness.load_json(path)
                config[key] = value
                with open(path, "w") as f:
                    json.dump(config, f)
                self.assertRefused(repo.dir, path, "%s must be in [1, " % key)

    def test_fifo_weights_are_refused_without_hanging(self):
        repo = self.repository("bad")
        weights = os.path.join(repo.dir, "bad", "weights.safetensors")
        os.remove(weights)
        os.mkfifo(weights)
        self.assertRefused(repo.dir, weights, "is a FIFO, not a regular file")

    def test_out_of_vocabulary_eos_is_refused(self):
        repo = harness.ModelRepository("loading")
        repo.add(CASE, name="bad", generation_config={"eos_token_id": 100})
        self.assertRefused(repo.dir, "generation_config.json", '"eos_token_id" is 100, outside '
                           "the model's vocabulary of 100 tokens")

    def test_bad_folder_stops_the_start_by_default(self):
        repo = self.repository("good", "zbad")
        with open(os.path.join(repo.dir, "zbad", "config.json"), "w") as f:
            f.write("{not json")
        self.assertRefused(repo.dir, os.path.join(repo.dir, "zbad"), "not valid JSON")

    def test_no_loadable_model_exits_non_zero(self):
        repo = self.repository("bad1", "bad2")
        for name in ("bad1", "bad2"):
            os.remove(os.path.join(repo.dir, name, "weights.safetensors"))
            os.mkfifo(os.path.join(repo.dir, name, "weights.safetensors"))
        self.assertRefused(repo.dir, "holds no servable model", "2 failed to load", "bad1",
                           "bad2", flags=["--skip_bad_models"])
        empty = harness.make_temp_dir("empty-repo")
        self.assertRefused(empty, "holds no servable model")

    def test_skip_bad_models_serves_the_good_ones(self):
        repo = self.repository("abad", "good")
        write_safetensors(os.path.join(repo.dir, "abad", "weights.safetensors"),
                          {"w": {"dtype": "F32", "shape": [2 ** 31, 2 ** 31],
                                 "data_offsets": [0, 0]}}, b"\0" * (1 << 20))
        metrics_port_file = os.path.join(harness.make_temp_dir("metrics"), "port")
        server = harness.Server(repo.dir, flags=["--skip_bad_models"], name="skip")
        server.flags += ["--metrics_port=0", "--metrics_port_file=%s" % metrics_port_file]
        server.start()
        try:
            result = harness.collect_stream(server.stub, harness.request(
                "good", prompt=[1, 2, 3], max_new_tokens=3))
            self.assertEqual(len(result.tokens), 3)
            with self.assertRaises(Exception) as refused:
                server.model_info("abad")
            self.assertIn("NOT_FOUND", str(refused.exception))
            with open(metrics_port_file) as f:
                port = int(f.read())
            text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                          timeout=10).read().decode()
            self.assertIn("performer_models_failed_to_load 1", text)
            log = server.log()
            self.assertIn("model failed to load: skipped", log)
            self.assertIn("tensor 'w'", log)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_sigterm_while_loading_exits_promptly(self):
        repo = self.repository("good")
        run = StartupRun(repo.dir, ["--test_load_delay_ms=600000"])
        # The runtime line is logged just before the models load.
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while "runtime" not in run.log():
            self.assertIsNone(run.proc.poll(), run.log())
            self.assertLess(time.monotonic(), deadline, "no runtime line:\n" + run.log())
            time.sleep(0.05)
        sent = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        code = run.wait(timeout=30)
        self.assertEqual(code, 128 + signal.SIGTERM, run.log())
        self.assertLess(time.monotonic() - sent, 10)
        self.assertIn("signal during start-up: exiting before serving", run.log())


if __name__ == "__main__":
    unittest.main()
