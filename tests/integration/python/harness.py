"""Shared helpers of the performer-serve integration tests.

* the golden fixtures the repository carries (<repo>/tests/fixtures; an
  external PERFORMER_FIXTURES root is for the parity suite, not read here)
  and a pure-Python safetensors reader;
* ModelRepository: a temporary model repository built from fixture folders
  (copied, optionally with a tokenizer.json / generation_config.json added);
* Server: starts performer-serve ($PERFORMER_SERVE, else
  <repo>/build/server/performer-serve) on 127.0.0.1 with --port=0
  --port_file=..., waits (at most STARTUP_TIMEOUT_S) until the port file
  appears (the server is ready), and always stops it again (the child also
  gets SIGKILL when this process dies, via PR_SET_PDEATHSIG);
* small gRPC helpers (collect a stream, expect an error, poll GetModel).

Every wait here has a timeout: RPCs carry deadlines, process waits and
polling loops give up, so that a hung server fails a test instead of
holding it until ctest's TIMEOUT.

The generated stubs (performer.v1, grpc_health.v1, grpc_reflection.v1alpha)
must be importable: ctest puts <build>/python on PYTHONPATH.
"""

import atexit
import ctypes
import json
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc

from performer.v1 import generation_pb2 as pb
from performer.v1 import generation_pb2_grpc as pb_grpc

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

STARTUP_TIMEOUT_S = float(os.environ.get("PERFORMER_STARTUP_TIMEOUT", "120"))


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

# How long to wait for a process that was sent SIGKILL to be reaped.
KILL_WAIT_S = 30


def fixtures_root():
    return os.path.join(REPO, "tests", "fixtures")


def performer_fixtures():
    return os.path.join(fixtures_root(), "performer")


def fixture_dir(case):
    return os.path.join(performer_fixtures(), case)


def fixtures_present():
    return os.path.isdir(performer_fixtures())


def require_cases(*cases):
    """Fails (AssertionError) unless every fixture case is present: the
    repository carries them, so a missing one is a broken checkout, not a
    reason to skip."""
    present = list_cases()
    missing = [case for case in cases if case not in present]
    if missing:
        raise AssertionError("fixture case(s) %s missing from %s"
                             % (", ".join(missing), performer_fixtures()))


def server_binary():
    return os.environ.get("PERFORMER_SERVE") or os.path.join(REPO, "build", "server",
                                                             "performer-serve")


_DTYPES = {"I64": ("q", 8), "I32": ("i", 4), "F32": ("f", 4), "F64": ("d", 8),
           "BOOL": ("?", 1), "U8": ("B", 1), "I8": ("b", 1)}


class Tensor:
    """A loaded safetensors tensor: shape and flat row-major values."""

    def __init__(self, dtype, shape, values):
        self.dtype = dtype
        self.shape = list(shape)
        self.values = values

    def rows(self):
        """[[...], ...] for a 2-D tensor."""
        assert len(self.shape) == 2, self.shape
        n = self.shape[1]
        return [self.values[i * n:(i + 1) * n] for i in range(self.shape[0])]

    def __repr__(self):
        return "Tensor(%s, %s)" % (self.dtype, self.shape)


def load_safetensors(path):
    """Pure-Python safetensors reader: {name: Tensor} (unknown dtypes skipped)."""
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len].decode("utf-8"))
    base = 8 + header_len
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = entry["dtype"]
        if dtype not in _DTYPES:
            continue
        fmt, size = _DTYPES[dtype]
        begin, end = entry["data_offsets"]
        raw = data[base + begin:base + end]
        count = len(raw) // size
        values = list(struct.unpack("<%d%s" % (count, fmt), raw))
        out[name] = Tensor(dtype, entry["shape"], values)
    return out


def load_json(path):
    with open(path) as f:
        return json.load(f)


def list_cases():
    root = performer_fixtures()
    if not os.path.isdir(root):
        return []
    return sorted(d for d in os.listdir(root)
                  if os.path.isfile(os.path.join(root, d, "config.json")))


def causal_greedy_cases():
    """Every causal PerformerLM fixture that has prompt + greedy_tokens:
    [(case, config, io)]."""
    cases = []
    for case in list_cases():
        config = load_json(os.path.join(fixture_dir(case), "config.json"))
        if config.get("model_class") != "PerformerLM" or not config.get("causal"):
            continue
        io_path = os.path.join(fixture_dir(case), "io.safetensors")
        if not os.path.isfile(io_path):
            continue
        io = load_safetensors(io_path)
        if "prompt" in io and "greedy_tokens" in io:
            cases.append((case, config, io))
    return cases


# ---------------------------------------------------------------------------
# Model repository
# ---------------------------------------------------------------------------

_TEMP_DIRS = []
_SERVERS = []


def make_temp_dir(prefix):
    path = tempfile.mkdtemp(prefix="performer-it-%s-" % prefix)
    _TEMP_DIRS.append(path)
    return path


class ModelRepository:
    """A temporary model repository made of copies of fixture folders."""

    def __init__(self, prefix="repo"):
        self.dir = make_temp_dir(prefix)

    def add(self, case, name=None, tokenizer=None, generation_config=None):
        """Copies fixture `case` as model `name` (default: the case name);
        optionally writes tokenizer.json / generation_config.json into it.
        Returns the model name."""
        name = name or case
        src = fixture_dir(case)
        dst = os.path.join(self.dir, name)
        os.makedirs(dst)
        for fname in ("config.json", "weights.safetensors"):
            shutil.copyfile(os.path.join(src, fname), os.path.join(dst, fname))
        if tokenizer is not None:
            with open(os.path.join(dst, "tokenizer.json"), "w") as f:
                json.dump(tokenizer, f)
        if generation_config is not None:
            with open(os.path.join(dst, "generation_config.json"), "w") as f:
                json.dump(generation_config, f)
        return name

    def add_required(self, *cases):
        """Copies every case; fails (require_cases) when one is absent."""
        require_cases(*cases)
        for case in cases:
            self.add(case)


# ---------------------------------------------------------------------------
# Server process
# ---------------------------------------------------------------------------

def _die_with_parent():
    # PR_SET_PDEATHSIG = 1: the server gets SIGKILL if the test process dies
    # (ctest timeout, Ctrl-C), so no server outlives its test.
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:  # pragma: no cover - best effort
        pass


# What a sanitizer writes when it finds an error (tools/sanitize.sh builds a
# performer-serve with them): a report fails the suite even when the process
# ended well, as a leak found at exit does.
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")


def assert_no_sanitizer_report(log, what):
    for marker in SANITIZER_REPORTS:
        at = log.find(marker)
        if at >= 0:
            raise AssertionError("%s: sanitizer report in the server log:\n%s"
                                 % (what, log[max(0, at - 200):at + 4000]))


class ServerError(RuntimeError):
    pass


class Server:
    """One performer-serve process on 127.0.0.1 and a channel to it."""

    def __init__(self, repository_dir, flags=(), name="server", channel_credentials=None,
                 metadata=()):
        """`channel_credentials`: grpc.ssl_channel_credentials(...) for a
        server with TLS (default: a plaintext channel); `metadata`: sent
        with the readiness check (a bearer token)."""
        self.repository_dir = repository_dir
        self.flags = list(flags)
        self.name = name
        self.channel_credentials = channel_credentials
        self.metadata = tuple(metadata)
        self.workdir = make_temp_dir(name)
        self.port_file = os.path.join(self.workdir, "port")
        self.log_path = os.path.join(self.workdir, "server.log")
        self.proc = None
        self.port = None
        self.channel = None
        self.stub = None
        self.startup_seconds = None

    # -- lifecycle -------------------------------------------------------
    def command(self):
        return [server_binary(),
                "--model_repository=%s" % self.repository_dir,
                "--host=127.0.0.1",
                "--port=0",
                "--port_file=%s" % self.port_file,
                # No fixed metrics port: servers run side by side
                # (MetricsServer turns it back on).
                "--metrics_port=-1"] + self.flags

    def start(self, timeout=STARTUP_TIMEOUT_S):
        binary = server_binary()
        if not os.access(binary, os.X_OK):
            raise ServerError("performer-serve binary %r is missing or not executable "
                              "(set PERFORMER_SERVE)" % binary)
        self._log = open(self.log_path, "wb")
        start = time.monotonic()
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent)
        _SERVERS.append(self)
        previous = None
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerError("performer-serve exited with code %s before it was ready:\n"
                                  "command: %s\n%s" % (code, " ".join(self.command()),
                                                       self.log_tail(80)))
            port = self._read_port()
            # Two equal reads in a row: a half-written file is not taken.
            if port is not None and port == previous:
                break
            previous = port
            if time.monotonic() - start > timeout:
                self.kill()
                raise ServerError("performer-serve did not write %s within %.0f s:\n%s"
                                  % (self.port_file, timeout, self.log_tail(80)))
            time.sleep(0.05)
        self.port = port
        self.startup_seconds = time.monotonic() - start
        if self.channel_credentials is None:
            self.channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        else:
            self.channel = grpc.secure_channel("127.0.0.1:%d" % port, self.channel_credentials)
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.stub = pb_grpc.GenerationStub(self.channel)
        return self

    def _read_port(self):
        try:
            with open(self.port_file) as f:
                text = f.read().strip()
        except OSError:
            return None
        if not text.isdigit() or int(text) <= 0:
            return None
        return int(text)

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum):
        self.proc.send_signal(signum)

    def wait(self, timeout):
        return self.proc.wait(timeout=timeout)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=KILL_WAIT_S)

    def stop(self, timeout=30):
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=KILL_WAIT_S)
        if not self._log.closed:
            self._log.close()
        assert_no_sanitizer_report(self.log(), self.name)
        return self.proc.returncode

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines=40):
        text = self.log().splitlines()
        return "\n".join("  | " + line for line in text[-lines:])

    # -- RPC helpers -----------------------------------------------------
    def model_info(self, name):
        return self.stub.GetModel(pb.GetModelRequest(name=name), timeout=10)

    def wait_model_idle(self, name, timeout=2.0):
        """Polls GetModel until no slot is in use and nothing is queued;
        returns (ok, last ModelInfo, seconds waited)."""
        start = time.monotonic()
        while True:
            info = self.model_info(name)
            if info.active_sequences == 0 and info.queued_requests == 0:
                return True, info, time.monotonic() - start
            if time.monotonic() - start > timeout:
                return False, info, time.monotonic() - start
            time.sleep(0.02)

    def wait_model(self, name, predicate, timeout=5.0):
        start = time.monotonic()
        while True:
            info = self.model_info(name)
            if predicate(info):
                return info
            if time.monotonic() - start > timeout:
                return None
            time.sleep(0.02)


def dump_server_logs(out=sys.stderr):
    for server in _SERVERS:
        out.write("\n---- %s log (%s), exit code %s ----\n%s\n"
                  % (server.name, server.log_path,
                     server.proc.returncode if server.proc else None, server.log_tail(60)))


def cleanup():
    for server in _SERVERS:
        try:
            server.kill()
        except Exception:
            pass
    if os.environ.get("PERFORMER_KEEP_TEMP"):
        for path in _TEMP_DIRS:
            sys.stderr.write("kept %s\n" % path)
        return
    for path in _TEMP_DIRS:
        shutil.rmtree(path, ignore_errors=True)
    del _TEMP_DIRS[:]


atexit.register(cleanup)


# ---------------------------------------------------------------------------
# Requests and responses
# ---------------------------------------------------------------------------

def request(model, prompt=None, text=None, **fields):
    """GenerateRequest for `model` with prompt token ids or text."""
    req = pb.GenerateRequest(model=model, **fields)
    if prompt is not None:
        req.prompt_tokens.SetInParent()  # present even when empty
        req.prompt_tokens.ids.extend(list(prompt))
    if text is not None:
        req.prompt_text = text
    return req


class StreamResult:
    """Everything a GenerateStream call gave: messages, then status."""

    def __init__(self):
        self.messages = []
        self.code = None
        self.details = None
        self.trailing_metadata = ()

    @property
    def tokens(self):
        return [t for m in self.messages for t in m.token_ids]

    @property
    def text(self):
        return "".join(m.text for m in self.messages)

    @property
    def logprobs(self):
        return [lp for m in self.messages for lp in m.logprobs]

    @property
    def last(self):
        return self.messages[-1] if self.messages else None

    def __repr__(self):
        return ("StreamResult(code=%s, details=%r, %d messages, tokens=%s, last=%s)"
                % (self.code, self.details, len(self.messages), self.tokens,
                   self.last and str(self.last).replace("\n", " ")))


def collect_stream(stub, req, timeout=60, on_message=None, call_holder=None):
    """Runs GenerateStream to the end; never raises for an RPC error (the
    status is in the result). on_message(call, index, message) is called
    after each message."""
    result = StreamResult()
    call = stub.GenerateStream(req, timeout=timeout)
    if call_holder is not None:
        call_holder.append(call)
    try:
        for i, msg in enumerate(call):
            result.messages.append(msg)
            if on_message is not None:
                on_message(call, i, msg)
        result.code = grpc.StatusCode.OK
    except grpc.RpcError as e:
        result.code = e.code()
        result.details = e.details()
    try:
        result.trailing_metadata = call.trailing_metadata() or ()
    except Exception:
        result.trailing_metadata = ()
    return result


def unary(stub, req, timeout=60):
    """Generate: (response or None, code, details, trailing metadata)."""
    try:
        response, call = stub.Generate.with_call(req, timeout=timeout)
        return response, grpc.StatusCode.OK, "", call.trailing_metadata() or ()
    except grpc.RpcError as e:
        return None, e.code(), e.details(), e.trailing_metadata() or ()


def metadata_value(metadata, key):
    for k, v in metadata or ():
        if k == key:
            return v
    return None


class ServerTestCase(unittest.TestCase):
    """A test class with one server shared by its tests.

    Subclasses define models(repo) -> None (add fixture folders) and FLAGS.
    """

    FLAGS = ()
    NAME = "server"
    server = None

    @classmethod
    def models(cls, repo):
        raise NotImplementedError

    @classmethod
    def repository_dir(cls):
        """The model repository to serve: by default a temporary one that
        models(repo) fills with fixture folders."""
        repo = ModelRepository(cls.NAME)
        cls.models(repo)
        cls.repo = repo
        return repo.dir

    @classmethod
    def setUpClass(cls):
        cls.server = Server(cls.repository_dir(), cls.FLAGS, name=cls.NAME)
        try:
            cls.server.start()
        except Exception:
            cls.server.kill()
            raise
        cls.stub = cls.server.stub

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            code = cls.server.stop()
            if code not in (0, None):
                sys.stderr.write("%s: performer-serve exited with %s after SIGTERM\n%s\n"
                                 % (cls.NAME, code, cls.server.log_tail(30)))

    # -- assertions ------------------------------------------------------
    def assertStatus(self, code, details, expected_code, *fields, msg=None):
        """expected_code, and every one of `fields` named in the details."""
        prefix = (msg + ": ") if msg else ""
        self.assertEqual(code, expected_code,
                         "%sexpected %s, got %s (%r)" % (prefix, expected_code, code, details))
        for field in fields:
            self.assertIn(field, details or "",
                          "%s%s message should name %r: %r" % (prefix, expected_code, field,
                                                               details))

    def assertStreamOk(self, result, msg=None):
        self.assertEqual(result.code, grpc.StatusCode.OK,
                         "%s%r" % ((msg + ": ") if msg else "", result))
        self.assertTrue(result.messages, "no message: %r" % result)
        for m in result.messages[:-1]:
            self.assertEqual(m.finish_reason, pb.FINISH_REASON_UNSPECIFIED,
                             "finish_reason set before the last message: %r" % result)

    def assertLogprobs(self, logprobs, tokens, vocab):
        self.assertEqual(len(logprobs), len(tokens), "one logprob per token")
        for lp in logprobs:
            self.assertTrue(math.isfinite(lp), "logprob %r is not finite" % lp)
            self.assertLessEqual(lp, 0.0, "logprob %r > 0" % lp)


def finish_name(value):
    return pb.FinishReason.Name(value)


def run_in_threads(fn, args_list, timeout=300):
    """Runs fn(*args) for each args in threads started together; returns the
    results in order (an exception is returned as the result; a thread still
    running after `timeout` seconds gives a TimeoutError)."""
    results = [None] * len(args_list)
    barrier = threading.Barrier(len(args_list))

    def body(i, args):
        try:
            barrier.wait(timeout=30)
            results[i] = fn(*args)
        except BaseException as e:  # noqa: B902 - reported by the caller
            results[i] = e

    threads = [threading.Thread(target=body, args=(i, a), daemon=True)
               for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for i, t in enumerate(threads):
        t.join(timeout=max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            results[i] = TimeoutError("still running after %.0f s" % timeout)
    return results


# ---------------------------------------------------------------------------
# Prometheus metrics (test_metrics): a server that also exposes /metrics, a
# parser of the Prometheus text exposition format, small HTTP helpers.
# ---------------------------------------------------------------------------

def read_port_file(path):
    """The port in `path`, or None while it is absent, empty or not a number."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if not text.isdigit() or int(text) <= 0:
        return None
    return int(text)


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=10):
    """(HTTP status, body as text); (None, error text) when no answer came."""
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)


def _parse_labels(text, i):
    """Parses `{a="x",b="y"}` starting at text[i] == '{'; returns (dict, index
    after '}')."""
    labels = {}
    i += 1
    while True:
        while text[i] in " ,":
            i += 1
        if text[i] == "}":
            return labels, i + 1
        eq = text.index("=", i)
        name = text[i:eq].strip()
        i = eq + 1
        while text[i] == " ":
            i += 1
        if text[i] != '"':
            raise ValueError("label %s: value not quoted" % name)
        i += 1
        value = []
        while text[i] != '"':
            if text[i] == "\\":
                nxt = text[i + 1]
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                i += 2
            else:
                value.append(text[i])
                i += 1
        labels[name] = "".join(value)
        i += 1


def parse_metrics(text):
    """Prometheus text format -> [(name, {label: value}, float value)]
    (comments and TYPE/HELP lines skipped)."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
            labels, end = _parse_labels(line, brace)
            rest = line[end:].split()
        else:
            name = line[:space]
            labels = {}
            rest = line[space:].split()
        samples.append((name, labels, float(rest[0])))
    return samples


def metric_values(samples, name, **labels):
    """The values of the samples called `name` whose labels include `labels`."""
    return [v for n, l, v in samples
            if n == name and all(l.get(k, "") == str(want) for k, want in labels.items())]


class MetricsServer(Server):
    """A Server that also serves Prometheus metrics: --metrics_port=0
    --metrics_port_file=...; start() waits for that file too."""

    def __init__(self, repository_dir, flags=(), name="server", **kwargs):
        super().__init__(repository_dir, flags, name, **kwargs)
        self.metrics_port_file = os.path.join(self.workdir, "metrics_port")
        self.metrics_port = None

    def command(self):
        return super().command() + ["--metrics_port=0",
                                    "--metrics_port_file=%s" % self.metrics_port_file]

    def start(self, timeout=STARTUP_TIMEOUT_S):
        super().start(timeout)
        deadline = time.monotonic() + timeout
        previous = None
        while True:
            port = read_port_file(self.metrics_port_file)
            if port is not None and port == previous:
                break
            previous = port
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise ServerError("performer-serve did not write %s:\n%s"
                                  % (self.metrics_port_file, self.log_tail(80)))
            time.sleep(0.05)
        self.metrics_port = port
        return self

    @property
    def metrics_address(self):
        return "127.0.0.1:%d" % self.metrics_port

    def metrics_text(self, timeout=10):
        status, body = http_get("http://%s/metrics" % self.metrics_address, timeout)
        if status != 200:
            raise ServerError("GET /metrics from %s: %s %s" % (self.name, status, body[:500]))
        return body

    def metrics(self):
        return parse_metrics(self.metrics_text())
