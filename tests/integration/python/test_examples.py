"""The example clients under examples/ (Python grpcio and Node @grpc/grpc-js)
against the repository's default model: each must print exactly the text the
server generates for the same greedy request, list the models, and report a
server error with its status name and message. The README's HTTP examples
(its curl command and examples/node/openai_chat.js, the `openai` client) give
gRPC's greedy text too. Run here so they cannot rot."""

import json
import os
import shutil
import subprocess
import sys
import unittest

import harness
import test_http
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


class HttpExamplesTest(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = test_http.HttpServer(name="examples-http").start()

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()

    def greedy(self, prompt, tokens):
        return self.server.stub.Generate(
            pb.GenerateRequest(prompt_text=prompt, max_new_tokens=tokens, temperature=0.0),
            timeout=60).text

    def test_readme_curl(self):
        with open(os.path.join(harness.REPO, "README.md")) as f:
            lines = f.read().splitlines()
        start = next(i for i, line in enumerate(lines)
                     if line.startswith("curl -s localhost:8000/v1/completions"))
        command = lines[start].rstrip("\\") + lines[start + 1]
        command = command.replace("localhost:8000", "127.0.0.1:%d" % self.server.http_port)
        result = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                                timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        answer = json.loads(result.stdout)
        self.assertEqual(answer["choices"][0]["text"],
                         self.greedy("Q:\tWhat is a computer?\nA:\t", 40))

    def test_node_openai_example(self):
        node = os.environ.get("PERFORMER_NODE") or shutil.which("node")
        if not node or not os.environ.get("NODE_PATH"):
            self.fail("the Node example needs node and NODE_PATH with openai "
                      "(ctest sets both after integration.npm_install)")
        example = os.path.join(harness.REPO, "examples", "node", "openai_chat.js")
        base_url = "http://127.0.0.1:%d/v1" % self.server.http_port
        result = subprocess.run([node, example, "--base-url", base_url, "--completion",
                                 "--max-tokens", str(NEW_TOKENS), PROMPT],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout, self.greedy(PROMPT, NEW_TOKENS) + "\n")
        self.assertIn("finish_reason: length", result.stderr)
        self.assertIn("%d generated tokens" % NEW_TOKENS, result.stderr)
        chat = subprocess.run([node, example, "--base-url", base_url, "Why?"],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(chat.returncode, 0, chat.stderr)
        self.assertIn("finish_reason:", chat.stderr)
        refused = subprocess.run([node, example, "--base-url", base_url, "--model", "nope", "a"],
                                 capture_output=True, text=True, timeout=120)
        self.assertEqual(refused.returncode, 1)
        self.assertIn("error: HTTP 404", refused.stderr)


if __name__ == "__main__":
    unittest.main()
