"""The example clients under examples/ (Python grpcio and Node @grpc/grpc-js)
against the repository's default model: each must print exactly the text the
server generates for the same greedy request, list the models, and report a
server error with its status name and message. Run here so they cannot rot."""

import os
import shutil
import subprocess
import sys
import unittest

import harness
from harness import pb

REPO_MODELS = os.path.join(harness.REPO, "models")
PYTHON_EXAMPLE = os.path.join(harness.REPO, "examples", "python", "generate.py")
NODE_EXAMPLE = os.path.join(harness.REPO, "examples", "node", "generate.js")
PROMPT = "Once upon a time"
NEW_TOKENS = 24


class ExamplesTest(harness.ServerTestCase):
    NAME = "examples"
    FLAGS = ("--max_batch=4",)

    @classmethod
    def repository_dir(cls):
        if not os.path.isdir(REPO_MODELS):
            raise AssertionError("%s is absent: the repository carries its default model"
                                 % REPO_MODELS)
        return REPO_MODELS

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        request = pb.GenerateRequest(prompt_text=PROMPT, max_new_tokens=NEW_TOKENS,
                                     temperature=0.0)
        cls.expected = cls.server.stub.Generate(request, timeout=60)

    def run_example(self, command, env=None):
        return subprocess.run(command, capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, **(env or {})))

    def python(self, *args):
        return self.run_example([sys.executable, PYTHON_EXAMPLE,
                                 "--target", self.server.address, *args])

    def node(self, *args):
        node = os.environ.get("PERFORMER_NODE") or shutil.which("node")
        if not node or not os.environ.get("NODE_PATH"):
            self.fail("the Node example needs node and NODE_PATH with @grpc/grpc-js "
                      "(ctest sets both after integration.npm_install)")
        return self.run_example([node, NODE_EXAMPLE, "--target", self.server.address, *args])

    def check_generation(self, result):
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.expected.usage.generated_tokens, NEW_TOKENS)
        self.assertEqual(result.stdout, self.expected.text + "\n")
        self.assertIn("LENGTH", result.stderr)
        self.assertIn("%d generated tokens" % NEW_TOKENS, result.stderr)

    def check_listing(self, result):
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"performer-fortunes\s+MODEL_KIND_DECODER\s+vocab=256")
        self.assertIn("(default)", result.stdout)

    def check_error(self, result):
        self.assertEqual(result.returncode, 1)
        self.assertIn("error: NOT_FOUND:", result.stderr)
        self.assertIn("no_such_model", result.stderr)

    def test_python_generate(self):
        self.check_generation(self.python("--temperature", "0",
                                          "--max_new_tokens", str(NEW_TOKENS), PROMPT))

    def check_session(self, run, name):
        # Two turns of a session: the second continues the first (its text
        # is that of one request with the whole history), and an unknown
        # session is NOT_FOUND.
        turn1 = run("--temperature", "0", "--max_new_tokens", "8", "--session", name,
                    "--create_session", PROMPT)
        self.assertEqual(turn1.returncode, 0, turn1.stderr)
        turn2 = run("--temperature", "0", "--max_new_tokens", "8", "--session", name, " and then")
        self.assertEqual(turn2.returncode, 0, turn2.stderr)
        history = PROMPT + turn1.stdout[:-1] + " and then"
        whole = self.server.stub.Generate(
            pb.GenerateRequest(prompt_text=history, max_new_tokens=8, temperature=0.0),
            timeout=60)
        self.assertEqual(turn2.stdout, whole.text + "\n")
        self.assertRegex(turn2.stderr, r"session %s at %d tokens" % (name, len(history.encode()) + 8))
        missing = run("--session", "never-created", PROMPT)
        self.assertEqual(missing.returncode, 1)
        self.assertIn("error: NOT_FOUND:", missing.stderr)

    def test_python_session(self):
        self.check_session(self.python, "python-chat")

    def test_node_session(self):
        self.check_session(self.node, "node-chat")

    def test_python_list(self):
        self.check_listing(self.python("--list"))

    def test_python_error(self):
        self.check_error(self.python("--model", "no_such_model", PROMPT))

    def test_node_generate(self):
        self.check_generation(self.node("--temperature", "0",
                                        "--max_new_tokens", str(NEW_TOKENS), PROMPT))

    def test_node_list(self):
        self.check_listing(self.node("--list"))

    def test_node_error(self):
        self.check_error(self.node("--model", "no_such_model", PROMPT))


if __name__ == "__main__":
    unittest.main()
