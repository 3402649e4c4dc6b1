"""The server's log lines (--log_format=json): one "request" line per finished
RPC with the request's id, model, status, tokens and timings; engine events
for load, warm-up, drain and stop; plain format by default; bad logging flags
are refused at start-up."""

import json
import signal
import subprocess
import unittest

import grpc

import harness
from harness import pb

MODEL = "lm_causal_default"


class JsonLogTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_cases(MODEL)
        repo = harness.ModelRepository("logs")
        repo.add(MODEL)
        cls.server = harness.Server(repo.dir, ["--log_format=json", "--log_level=info",
                                               "--metrics_port=-1"], name="logs")
        cls.server.start()
        stub = cls.server.stub
        cls.ok = harness.collect_stream(stub, harness.request(
            MODEL, [1, 2, 3], max_new_tokens=5, temperature=0.0, ignore_eos=True,
            request_id="log-ok"))
        try:
            stub.Generate(harness.request("no_such_model", [1], request_id="log-missing"),
                          timeout=10)
        except grpc.RpcError as e:
            cls.missing_code = e.code()
        stub.ListModels(pb.ListModelsRequest(), timeout=10)
        cls.exit_code = cls.server.stop()
        cls.lines = cls.server.log().splitlines()

    def records(self):
        out = []
        for line in self.lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                self.fail("not a JSON line: %r" % line)
        return out

    def requests(self):
        return [r for r in self.records() if r["msg"] == "request"]

    def test_every_line_is_json_with_time_level_message(self):
        records = self.records()
        self.assertGreater(len(records), 3)
        for r in records:
            self.assertIn("ts", r)
            self.assertIn(r["level"], ("trace", "debug", "info", "warn", "error", "critical"))
            self.assertIsInstance(r["msg"], str)

    def test_one_request_line_per_rpc(self):
        by_method = {}
        for r in self.requests():
            by_method.setdefault(r["method"], []).append(r)
        self.assertEqual(len(by_method.get("GenerateStream", [])), 1)
        self.assertEqual(len(by_method.get("Generate", [])), 1)
        self.assertEqual(len(by_method.get("ListModels", [])), 1)

    def test_successful_stream_line(self):
        (r,) = [r for r in self.requests() if r["method"] == "GenerateStream"]
        self.assertEqual(r["request_id"], "log-ok")
        self.assertEqual(r["model"], MODEL)
        self.assertEqual(r["status"], "OK")
        self.assertEqual(r["level"], "info")
        self.assertEqual(r["finish_reason"], "length")
        self.assertEqual(r["prompt_tokens"], 3)
        self.assertEqual(r["generated_tokens"], 5)
        self.assertEqual(r["generated_tokens"], len(self.ok.tokens))
        self.assertGreaterEqual(r["queue_seconds"], 0)
        self.assertGreater(r["ttft_seconds"], 0)
        self.assertGreaterEqual(r["duration_seconds"], r["ttft_seconds"])
        self.assertTrue(r["peer"].startswith("ipv4:127.0.0.1:") or r["peer"].startswith("ipv6:"),
                        r["peer"])

    def test_refused_request_line(self):
        self.assertEqual(self.missing_code, grpc.StatusCode.NOT_FOUND)
        (r,) = [r for r in self.requests() if r["method"] == "Generate"]
        self.assertEqual(r["request_id"], "log-missing")
        self.assertEqual(r["status"], "NOT_FOUND")
        self.assertEqual(r["level"], "warn")
        self.assertIn("no_such_model", r["error"])
        self.assertEqual(r["generated_tokens"], 0)
        self.assertNotIn("finish_reason", r)

    def test_engine_events(self):
        events = [(r["event"], r["model"]) for r in self.records() if r["msg"] == "engine"]
        for event in ("warmup", "load", "drain", "stopped"):
            self.assertIn((event, MODEL), events)
        (load,) = [r for r in self.records() if r["msg"] == "engine" and r["event"] == "load"]
        self.assertEqual(load["kind"], "decoder")
        self.assertGreater(load["state_bytes_per_sequence"], 0)
        self.assertIs(load["cuda_graphs"], False)  # CPU serving: eager steps
        self.assertGreater(load["load_seconds"], 0)
        self.assertEqual(self.exit_code, 0)


class LogFlagsTest(unittest.TestCase):

    def run_server(self, *flags):
        return subprocess.run([harness.server_binary(), "--model_repository=/nonexistent",
                               *flags], capture_output=True, text=True, timeout=60)

    def test_bad_format_is_refused(self):
        result = self.run_server("--log_format=xml")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--log_format", result.stderr)

    def test_bad_level_is_refused(self):
        result = self.run_server("--log_level=loud")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--log_level", result.stderr)

    def test_plain_format_by_default(self):
        result = self.run_server()
        self.assertEqual(result.returncode, 1)
        # A plain line: [time] [level] message, here the failed start-up.
        self.assertRegex(result.stderr, r"\[\S+\] \[critical\] .*model repository /nonexistent")


if __name__ == "__main__":
    unittest.main()
