"""tools/check_ctest_skips.py on small ctest reports: a skip under `cuda` or
`deploy` passes, one under any other label (or none) fails, naming it."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "check_ctest_skips.py")


def junit(cases):
    body = "".join(
        f'<testcase name="{name}" status="{"notrun" if skipped else "run"}">'
        + ('<skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/>' if skipped else "")
        + "</testcase>" for name, skipped in cases)
    return f'<?xml version="1.0"?><testsuite tests="{len(cases)}">{body}</testsuite>'


def listing(labels):
    return {"tests": [{"name": name, "properties": [{"name": "LABELS", "value": value}]}
                      for name, value in labels.items()]}


class CheckCtestSkipsTest(unittest.TestCase):
    def run_check(self, cases, labels):
        with tempfile.TemporaryDirectory() as d:
            xml_path = os.path.join(d, "junit.xml")
            json_path = os.path.join(d, "tests.json")
            with open(xml_path, "w") as f:
                f.write(junit(cases))
            with open(json_path, "w") as f:
                json.dump(listing(labels), f)
            return subprocess.run([sys.executable, SCRIPT, xml_path, json_path],
                                  capture_output=True, text=True)

    def test_skips_under_cuda_and_deploy_pass(self):
        done = self.run_check(
            [("Kernel.Gpu", True), ("deploy.image", True), ("Engine.Works", False)],
            {"Kernel.Gpu": ["cuda"], "deploy.image": ["deploy"], "Engine.Works": ["unit"]})
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertIn("2 skipped", done.stdout)

    def test_a_skip_under_another_label_fails_and_is_named(self):
        done = self.run_check(
            [("Kernel.Gpu", True), ("Serving.SetUpFailed", True), ("Parity.Case", True)],
            {"Kernel.Gpu": ["cuda"], "Serving.SetUpFailed": ["unit"], "Parity.Case": []})
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("Serving.SetUpFailed (labels: unit)", done.stdout)
        self.assertIn("Parity.Case (labels: none)", done.stdout)
        self.assertNotIn("Kernel.Gpu", done.stdout)


if __name__ == "__main__":
    unittest.main()
