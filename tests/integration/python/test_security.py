"""TLS, mutual TLS, bearer tokens, permissions, the metrics token,
reflection and credential reloads, against the real performer-serve with
real gRPC clients.

Certificates are made with the openssl command line into a temporary
folder when the module starts: a CA, a server certificate for 127.0.0.1
and localhost, a client certificate from that CA, and a second CA with a
client certificate of its own (which the server must refuse). Every server
listens on 127.0.0.1; every RPC and wait has a timeout.
"""

import base64
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import unittest

import grpc

import harness
from grpc_health.v1 import health_pb2
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc
from performer.v1 import generation_pb2 as pb
from performer.v1 import generation_pb2_grpc as pb_grpc

REPO_MODELS = os.path.join(harness.REPO, "models")
MODEL = "performer-fortunes"
RPC_TIMEOUT = 30

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
ROOT = "root-token-0123456789abcdef"
CAROL = "carol-token-0123456789abcdef"
METRICS = "metrics-token-0123456789abcdef"

CERTS = {}

# What a client refused at the TLS handshake sees: the connection fails
# (UNAVAILABLE), or, while it keeps retrying, the deadline passes.
REFUSED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def _openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, timeout=60,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _make_ca(directory, name):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", name + ".key", "-out", name + ".pem", "-days", "2",
             "-subj", "/CN=performer test " + name, cwd=directory)


def _make_cert(directory, name, ca, extensions):
    with open(os.path.join(directory, name + ".ext"), "w") as f:
        f.write(extensions + "\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", name + ".key", "-out", name + ".csr",
             "-subj", "/CN=" + name, cwd=directory)
    _openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
             "-CAcreateserial", "-out", name + ".pem", "-days", "2",
             "-extfile", name + ".ext", cwd=directory)


def setUpModule():
    directory = harness.make_temp_dir("certs")
    server_ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth"
    client_ext = "extendedKeyUsage=clientAuth"
    _make_ca(directory, "ca")
    _make_ca(directory, "other-ca")
    _make_cert(directory, "server", "ca", server_ext)
    _make_cert(directory, "server-renewed", "ca", server_ext)
    _make_cert(directory, "client", "ca", client_ext)
    _make_cert(directory, "stranger", "other-ca", client_ext)
    for name in ("ca", "other-ca", "server", "server-renewed", "client", "stranger"):
        for ext in ("pem", "key"):
            CERTS["%s.%s" % (name, ext)] = os.path.join(directory, "%s.%s" % (name, ext))


def read(path):
    with open(path, "rb") as f:
        return f.read()


def tls_credentials(client=None):
    """Channel credentials trusting our CA, with `client`'s certificate."""
    if client is None:
        return grpc.ssl_channel_credentials(root_certificates=read(CERTS["ca.pem"]))
    return grpc.ssl_channel_credentials(root_certificates=read(CERTS["ca.pem"]),
                                        private_key=read(CERTS[client + ".key"]),
                                        certificate_chain=read(CERTS[client + ".pem"]))


def bearer(token):
    return (("authorization", "Bearer " + token),)


def write_file(path, text):
    """Replaces `path` whole (a rename), as a Secret update does."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def code_of(fn):
    """The status code of an RPC made by fn(), OK when it returns."""
    try:
        fn()
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def greedy(max_new_tokens, request_id="", priority=0):
    req = harness.request(MODEL, text="Once upon a time", max_new_tokens=max_new_tokens,
                          temperature=0.0, request_id=request_id, priority=priority)
    req.ignore_eos = True
    return req


class Stream:
    """A GenerateStream running in a thread; `first` is set at its first
    message."""

    def __init__(self, stub, req, metadata, timeout=120):
        self.first = threading.Event()
        self.messages = []
        self.code = None
        self.thread = threading.Thread(target=self._run, args=(stub, req, metadata, timeout),
                                       daemon=True)
        self.thread.start()

    def _run(self, stub, req, metadata, timeout):
        try:
            for message in stub.GenerateStream(req, timeout=timeout, metadata=metadata):
                self.messages.append(message)
                self.first.set()
            self.code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            self.code = e.code()
        self.first.set()

    def join(self, timeout=120):
        self.thread.join(timeout)
        return not self.thread.is_alive()

    @property
    def finish_reason(self):
        return self.messages[-1].finish_reason if self.messages else None

    @property
    def tokens(self):
        return sum(len(m.token_ids) for m in self.messages)


def https_request(port, method, path, token=None, body=None, client=None):
    """(status, body) of one HTTPS request trusting our CA, presenting
    `client`'s certificate when given."""
    context = ssl.create_default_context(cafile=CERTS["ca.pem"])
    if client is not None:
        context.load_cert_chain(CERTS[client + ".pem"], CERTS[client + ".key"])
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=30)
    try:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = "Bearer " + token
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


class SecureServerTestCase(unittest.TestCase):
    """One performer-serve with TLS, tokens and a metrics token for the class."""

    TOKENS = "%s alice\n%s bob\n%s root admin\n" % (ALICE, BOB, ROOT)
    # Keeps streams running while a test acts on them (a cancel, a reload).
    EXTRA_FLAGS = ("--step_delay_ms=20",)
    NAME = "secure"

    @classmethod
    def setUpClass(cls):
        cls.workdir = harness.make_temp_dir(cls.NAME)
        cls.tokens_file = os.path.join(cls.workdir, "tokens")
        write_file(cls.tokens_file, "# test tokens\n" + cls.TOKENS)
        cls.metrics_token_file = os.path.join(cls.workdir, "metrics-token")
        write_file(cls.metrics_token_file, METRICS + "\n")
        cls.health_port = harness.free_port()
        cls.cert_file = os.path.join(cls.workdir, "tls.crt")
        cls.key_file = os.path.join(cls.workdir, "tls.key")
        write_file(cls.cert_file, read(CERTS["server.pem"]).decode())
        write_file(cls.key_file, read(CERTS["server.key"]).decode())
        flags = ["--tls_cert_file=" + cls.cert_file, "--tls_key_file=" + cls.key_file,
                 "--auth_tokens_file=" + cls.tokens_file,
                 "--metrics_auth_token_file=" + cls.metrics_token_file,
                 "--health_port=%d" % cls.health_port,
                 "--credentials_reload_seconds=1"] + list(cls.EXTRA_FLAGS)
        http_port_file = os.path.join(cls.workdir, "http_port")
        flags += ["--http_port=0", "--http_port_file=" + http_port_file]
        cls.server = harness.MetricsServer(REPO_MODELS, flags, name=cls.NAME,
                                           channel_credentials=tls_credentials())
        try:
            cls.server.start()
        except Exception:
            harness.dump_server_logs()
            raise
        cls.stub = cls.server.stub
        cls.http_port = harness.read_port_file(http_port_file)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def list_models(self, metadata=()):
        return self.stub.ListModels(pb.ListModelsRequest(), timeout=RPC_TIMEOUT, metadata=metadata)

    def https(self, method, path, token=None, body=None, client=None):
        """(status, body) of one HTTPS request to the HTTP port."""
        return https_request(self.http_port, method, path, token, body, client)

    def cancel(self, token, request_id):
        return self.stub.Cancel(pb.CancelRequest(request_id=request_id), timeout=RPC_TIMEOUT,
                                metadata=bearer(token)).cancelled


class TlsAndTokensTest(SecureServerTestCase):
    NAME = "tls-tokens"

    def test_tls_client_with_a_token_generates(self):
        self.assertEqual(self.list_models(bearer(ALICE)).default_model, MODEL)
        response = self.stub.Generate(greedy(4), timeout=RPC_TIMEOUT, metadata=bearer(ALICE))
        self.assertEqual(len(response.token_ids), 4)

    def test_plaintext_client_is_refused(self):
        with grpc.insecure_channel(self.server.address) as channel:
            stub = pb_grpc.GenerationStub(channel)
            code = code_of(lambda: stub.ListModels(pb.ListModelsRequest(), timeout=5,
                                                   metadata=bearer(ALICE)))
        self.assertIn(code, REFUSED)

    def test_client_that_does_not_trust_the_server_is_refused(self):
        credentials = grpc.ssl_channel_credentials(
            root_certificates=read(CERTS["other-ca.pem"]))
        with grpc.secure_channel(self.server.address, credentials) as channel:
            stub = pb_grpc.GenerationStub(channel)
            code = code_of(lambda: stub.ListModels(pb.ListModelsRequest(), timeout=5,
                                                   metadata=bearer(ALICE)))
        self.assertIn(code, REFUSED)

    def test_calls_without_a_valid_token_are_unauthenticated(self):
        for metadata in ((), bearer("wrong-token-0123456789abcdef"),
                         (("authorization", "Basic " + ALICE),), (("authorization", ALICE),)):
            with self.subTest(metadata=metadata):
                with self.assertRaises(grpc.RpcError) as raised:
                    self.list_models(metadata)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                self.assertNotIn(ALICE, raised.exception.details())
        with self.assertRaises(grpc.RpcError) as raised:
            list(self.stub.GenerateStream(greedy(2), timeout=RPC_TIMEOUT))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    def test_every_service_on_the_port_is_gated(self):
        # A method of another service (the Open Inference Protocol's):
        # refused before routing without a token, answered with one.
        ping = self.server.channel.unary_unary(
            "/inference.GRPCInferenceService/ServerLive",
            request_serializer=lambda x: x, response_deserializer=lambda x: x)
        self.assertEqual(code_of(lambda: ping(b"", timeout=RPC_TIMEOUT)),
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(code_of(lambda: ping(b"", timeout=RPC_TIMEOUT, metadata=bearer(BOB))),
                         grpc.StatusCode.OK)

    def test_performer_client_with_tls_and_a_token(self):
        client = os.environ.get("PERFORMER_CLIENT") or os.path.join(
            harness.REPO, "build", "tools", "performer-client")
        token_file = os.path.join(self.workdir, "client-token")
        write_file(token_file, ALICE + "\n")
        base = [client, "--server=127.0.0.1:%d" % self.server.port,
                "--tls_ca_file=" + CERTS["ca.pem"], "--timeout=30s"]
        ok = subprocess.run(base + ["--token_file=" + token_file, "list"], capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn(MODEL, ok.stdout)
        refused = subprocess.run(base + ["list"], capture_output=True, text=True, timeout=60,
                                 stdin=subprocess.DEVNULL)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("UNAUTHENTICATED", refused.stderr)

    def test_health_needs_no_token(self):
        health = health_pb2_grpc.HealthStub(self.server.channel)
        for service in ("", "performer.v1.Generation", "liveness"):
            response = health.Check(health_pb2.HealthCheckRequest(service=service),
                                    timeout=RPC_TIMEOUT)
            self.assertEqual(response.status, health_pb2.HealthCheckResponse.SERVING, service)

    def test_health_port_serves_only_health_in_plaintext(self):
        with grpc.insecure_channel("127.0.0.1:%d" % self.health_port) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            response = health.Check(health_pb2.HealthCheckRequest(service="liveness"),
                                    timeout=RPC_TIMEOUT)
            self.assertEqual(response.status, health_pb2.HealthCheckResponse.SERVING)
            stub = pb_grpc.GenerationStub(channel)
            with self.assertRaises(grpc.RpcError) as raised:
                stub.ListModels(pb.ListModelsRequest(), timeout=RPC_TIMEOUT,
                                metadata=bearer(ROOT))
            self.assertEqual(raised.exception.code(), grpc.StatusCode.PERMISSION_DENIED)

    def test_reflection_is_off_by_default(self):
        reflection = reflection_pb2_grpc.ServerReflectionStub(self.server.channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        with self.assertRaises(grpc.RpcError) as raised:
            list(reflection.ServerReflectionInfo(iter([request]), timeout=RPC_TIMEOUT,
                                                 metadata=bearer(ALICE)))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    def test_priority_above_the_bound_needs_the_permission(self):
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.Generate(greedy(2, priority=1), timeout=RPC_TIMEOUT,
                               metadata=bearer(ALICE))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn("priority", raised.exception.details())
        response = self.stub.Generate(greedy(2, priority=7), timeout=RPC_TIMEOUT,
                                      metadata=bearer(ROOT))
        self.assertEqual(len(response.token_ids), 2)

    def test_a_caller_cannot_cancel_another_callers_request(self):
        alice = Stream(self.stub, greedy(40, request_id="shared-id"), bearer(ALICE))
        self.assertTrue(alice.first.wait(60), "alice's stream did not start")
        self.assertFalse(self.cancel(BOB, "shared-id"))
        # Bob's own request may carry the same id.
        response = self.stub.Generate(greedy(3, request_id="shared-id"), timeout=RPC_TIMEOUT,
                                      metadata=bearer(BOB))
        self.assertEqual(len(response.token_ids), 3)
        self.assertTrue(alice.join(), "alice's stream did not end")
        self.assertEqual(alice.code, grpc.StatusCode.OK)
        self.assertEqual(alice.finish_reason, pb.FINISH_REASON_LENGTH)
        self.assertEqual(alice.tokens, 40)

    def test_a_caller_cannot_reach_another_callers_session(self):
        turn = greedy(3)
        turn.session_id = "shared-session"
        turn.create_session = True
        self.stub.Generate(turn, timeout=RPC_TIMEOUT, metadata=bearer(ALICE))
        export = pb.ExportSessionRequest(model=MODEL, session_id="shared-session")
        for call in (lambda: self.stub.ExportSession(export, timeout=RPC_TIMEOUT,
                                                     metadata=bearer(BOB)),
                     lambda: self.stub.DeleteSession(
                         pb.DeleteSessionRequest(model=MODEL, session_id="shared-session"),
                         timeout=RPC_TIMEOUT, metadata=bearer(BOB))):
            with self.assertRaises(grpc.RpcError) as refused:
                call()
            self.assertEqual(refused.exception.code(), grpc.StatusCode.NOT_FOUND)
        state = self.stub.ExportSession(export, timeout=RPC_TIMEOUT, metadata=bearer(ALICE))
        self.assertEqual(state.tokens, len("Once upon a time") + 3)

    def test_cancel_any_permission_cancels_every_callers_request(self):
        alice = Stream(self.stub, greedy(1000, request_id="admin-cancels"), bearer(ALICE))
        self.assertTrue(alice.first.wait(60), "alice's stream did not start")
        self.assertTrue(self.cancel(ROOT, "admin-cancels"))
        self.assertTrue(alice.join(), "alice's stream did not end")
        self.assertEqual(alice.code, grpc.StatusCode.OK)
        self.assertEqual(alice.finish_reason, pb.FINISH_REASON_CANCELLED)
        self.assertLess(alice.tokens, 1000)

    def _scrape(self, authorization=None):
        import urllib.error
        import urllib.request
        req = urllib.request.Request("http://%s/metrics" % self.server.metrics_address)
        if authorization is not None:
            req.add_header("Authorization", authorization)
        try:
            with urllib.request.urlopen(req, timeout=RPC_TIMEOUT) as r:
                return r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, ""

    def test_metrics_need_their_token(self):
        def basic(password):
            return "Basic " + base64.b64encode(("prometheus:" + password).encode()).decode()

        self.assertEqual(self._scrape()[0], 401)
        self.assertEqual(self._scrape(basic("wrong-token-0123456789"))[0], 401)
        self.assertEqual(self._scrape(basic(ALICE))[0], 401, "a gRPC token is not the metrics one")
        self.list_models(bearer(ALICE))
        code_of(lambda: self.list_models())
        status, body = self._scrape(basic(METRICS))
        self.assertEqual(status, 200)
        samples = harness.parse_metrics(body)
        self.assertGreaterEqual(sum(harness.metric_values(
            samples, "performer_auth_attempts_total", caller="alice", result="ok")), 1)
        self.assertGreaterEqual(sum(harness.metric_values(
            samples, "performer_auth_attempts_total", caller="", result="missing")), 1)
        for _, labels, _ in samples:
            self.assertNotIn(ALICE, labels.values())


class HttpsTest(SecureServerTestCase):
    """The HTTP port of a server with TLS and tokens speaks HTTPS only, with
    the gRPC port's certificate and tokens."""
    NAME = "https"
    EXTRA_FLAGS = ()

    def test_https_with_a_token_generates(self):
        status, body = self.https("GET", "/v1/models", ALICE)
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["data"][0]["id"], MODEL)
        status, body = self.https("POST", "/v1/completions", ALICE,
                                  {"model": MODEL, "prompt": "a", "max_tokens": 3})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["usage"]["completion_tokens"], 3)

    def test_https_without_or_with_a_wrong_token_is_401(self):
        for token in (None, "x" * 32):
            status, body = self.https("POST", "/v1/completions", token,
                                      {"model": MODEL, "prompt": "a", "max_tokens": 3})
            self.assertEqual(status, 401, body)
            self.assertEqual(json.loads(body)["error"]["type"], "authentication_error")

    def test_a_priority_above_the_bound_needs_the_permission(self):
        status, body = self.https("POST", "/v1/completions", ALICE,
                                  {"model": MODEL, "prompt": "a", "max_tokens": 2, "priority": 9})
        self.assertEqual(status, 403, body)
        self.assertEqual(json.loads(body)["error"]["type"], "permission_error")
        status, body = self.https("POST", "/v1/completions", ROOT,
                                  {"model": MODEL, "prompt": "a", "max_tokens": 2, "priority": 9})
        self.assertEqual(status, 200, body)

    def test_plaintext_http_gets_no_answer(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=10)
        try:
            with self.assertRaises((http.client.HTTPException, OSError)):
                conn.request("GET", "/v1/models")
                conn.getresponse().read()
        finally:
            conn.close()


class ReloadTest(SecureServerTestCase):
    NAME = "reload"
    # A 100-token stream lasts at least 5 s: it is still running when the
    # reload (a SIGHUP, or the 1 s file watcher) has happened.
    EXTRA_FLAGS = ("--step_delay_ms=50",)

    def test_sighup_swaps_tokens_while_a_stream_runs(self):
        # Bob's stream is running when his token is removed: it finishes.
        bob = Stream(self.stub, greedy(100, request_id="running"), bearer(BOB))
        self.assertTrue(bob.first.wait(60), "bob's stream did not start")
        write_file(self.tokens_file, "%s alice\n%s carol\n%s root admin\n" % (ALICE, CAROL, ROOT))
        self.server.signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while code_of(lambda: self.list_models(bearer(CAROL))) != grpc.StatusCode.OK:
            self.assertLess(time.monotonic(), deadline, "carol's new token never worked")
            time.sleep(0.05)
        self.assertEqual(code_of(lambda: self.list_models(bearer(BOB))),
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(code_of(lambda: self.list_models(bearer(ALICE))), grpc.StatusCode.OK)
        self.assertTrue(bob.thread.is_alive(), "bob's stream ended before the reload")
        self.assertTrue(bob.join(), "bob's stream did not end")
        self.assertEqual(bob.code, grpc.StatusCode.OK)
        self.assertEqual(bob.finish_reason, pb.FINISH_REASON_LENGTH)
        self.assertEqual(bob.tokens, 100)
        self.assertTrue(self.server.running())
        self.assertIn("credentials reloaded", self.server.log())

    def test_a_bad_token_file_keeps_the_tokens_in_force(self):
        write_file(self.tokens_file, "short\n")
        self.server.signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while "credentials reload failed" not in self.server.log():
            self.assertLess(time.monotonic(), deadline, "no reload failure logged")
            time.sleep(0.05)
        self.assertEqual(code_of(lambda: self.list_models(bearer(ROOT))), grpc.StatusCode.OK)
        write_file(self.tokens_file, self.TOKENS)  # as the class began

    def _server_certificate(self, port=None):
        """The certificate a new handshake gets (DER), None if it failed."""
        context = ssl.create_default_context(cafile=CERTS["ca.pem"])
        context.set_alpn_protocols(["h2"] if port is None else ["http/1.1"])
        try:
            with socket.create_connection(("127.0.0.1", port or self.server.port),
                                          timeout=10) as sock:
                with context.wrap_socket(sock, server_hostname="localhost") as tls:
                    return tls.getpeercert(binary_form=True)
        except (ssl.SSLError, OSError):
            return None

    def test_renewed_certificate_is_served_without_a_restart(self):
        old = ssl.PEM_cert_to_DER_cert(read(CERTS["server.pem"]).decode())
        new = ssl.PEM_cert_to_DER_cert(read(CERTS["server-renewed.pem"]).decode())
        self.assertEqual(self._server_certificate(), old)
        stream = Stream(self.stub, greedy(100), bearer(ALICE))
        self.assertTrue(stream.first.wait(60), "the stream did not start")
        # The key first, then the certificate: gRPC's watcher keeps the old
        # pair until the two match again.
        write_file(self.key_file, read(CERTS["server-renewed.key"]).decode())
        write_file(self.cert_file, read(CERTS["server-renewed.pem"]).decode())
        deadline = time.monotonic() + 30
        while self._server_certificate() != new:
            self.assertLess(time.monotonic(), deadline, "the renewed certificate is not served")
            time.sleep(0.2)
        # The HTTPS port too.
        while self._server_certificate(self.http_port) != new:
            self.assertLess(time.monotonic(), deadline, "HTTPS serves the old certificate")
            time.sleep(0.2)
        self.assertTrue(stream.thread.is_alive(), "the stream ended before the renewal")
        self.assertTrue(stream.join(), "the stream did not end")
        self.assertEqual(stream.code, grpc.StatusCode.OK)
        self.assertEqual(stream.tokens, 100)
        # A new channel handshakes with the renewed certificate.
        with grpc.secure_channel(self.server.address, tls_credentials()) as channel:
            stub = pb_grpc.GenerationStub(channel)
            self.assertEqual(stub.ListModels(pb.ListModelsRequest(), timeout=RPC_TIMEOUT,
                                             metadata=bearer(ALICE)).default_model, MODEL)


class MutualTlsTest(unittest.TestCase):
    """--tls_client_ca_file: a client certificate from that CA is required."""

    @classmethod
    def setUpClass(cls):
        workdir = harness.make_temp_dir("mtls-http")
        http_port_file = os.path.join(workdir, "http_port")
        flags = ["--tls_cert_file=" + CERTS["server.pem"], "--tls_key_file=" + CERTS["server.key"],
                 "--tls_client_ca_file=" + CERTS["ca.pem"], "--http_port=0",
                 "--http_port_file=" + http_port_file]
        cls.server = harness.Server(REPO_MODELS, flags, name="mtls",
                                    channel_credentials=tls_credentials("client"))
        try:
            cls.server.start()
        except Exception:
            harness.dump_server_logs()
            raise
        cls.http_port = harness.read_port_file(http_port_file)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def list_models_with(self, credentials):
        with grpc.secure_channel(self.server.address, credentials) as channel:
            stub = pb_grpc.GenerationStub(channel)
            return code_of(lambda: stub.ListModels(pb.ListModelsRequest(), timeout=5))

    def test_client_with_a_certificate_from_the_ca_is_served(self):
        self.assertEqual(self.list_models_with(tls_credentials("client")), grpc.StatusCode.OK)

    def test_client_without_a_certificate_is_refused(self):
        self.assertIn(self.list_models_with(tls_credentials()), REFUSED)

    def test_client_certificate_from_another_ca_is_refused(self):
        self.assertIn(self.list_models_with(tls_credentials("stranger")), REFUSED)

    def test_https_needs_a_client_certificate_from_the_ca(self):
        status, body = https_request(self.http_port, "GET", "/v1/models", client="client")
        self.assertEqual(status, 200, body)
        for client in (None, "stranger"):
            with self.assertRaises((ssl.SSLError, OSError, http.client.HTTPException)):
                https_request(self.http_port, "GET", "/v1/models", client=client)


class StartupChecksTest(unittest.TestCase):
    """Bad security flags or files stop the server before it listens, with
    exit status 2 and a message naming the flag."""

    def run_server(self, *flags):
        command = [harness.server_binary(), "--model_repository=" + REPO_MODELS,
                   "--host=127.0.0.1", "--port=0", "--metrics_port=-1"] + list(flags)
        return subprocess.run(command, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)

    def test_refusals(self):
        workdir = harness.make_temp_dir("startup")
        bad_tokens = os.path.join(workdir, "tokens")
        write_file(bad_tokens, "%s alice\n%s alice-again\n" % (ALICE, ALICE))
        two_tokens = os.path.join(workdir, "two-tokens")
        write_file(two_tokens, "%s\n%s\n" % (ALICE, BOB))
        short_key = os.path.join(workdir, "short-key")
        write_file(short_key, "too-short-a-key\n")
        cases = [
            (["--tls_cert_file=" + CERTS["server.pem"]], "--tls_key_file"),
            (["--tls_cert_file=" + CERTS["server.pem"], "--tls_key_file=" + CERTS["client.key"]],
             "is not the key"),
            (["--tls_cert_file=" + CERTS["server.key"], "--tls_key_file=" + CERTS["server.key"]],
             "no PEM certificate"),
            (["--tls_client_ca_file=" + CERTS["ca.pem"]], "--tls_client_ca_file needs"),
            (["--auth_tokens_file=" + bad_tokens], "line 2"),
            (["--auth_tokens_file=" + os.path.join(workdir, "absent")], "--auth_tokens_file"),
            (["--metrics_auth_token_file=" + two_tokens], "exactly one"),
            (["--credentials_reload_seconds=0"], "--credentials_reload_seconds"),
            (["--state_signing_key_file=" + short_key], "holds 15 bytes; a key has at least 32"),
            (["--state_signing_key_file=" + os.path.join(workdir, "absent")],
             "--state_signing_key_file"),
            (["--session_persist"], "--session_persist needs --state_spill_dir"),
            (["--session_peers=replica-b"], "is not host:port"),
        ]
        for flags, message in cases:
            with self.subTest(flags=flags):
                result = self.run_server(*flags)
                self.assertEqual(result.returncode, 2, result.stderr[-2000:])
                self.assertIn(message, result.stderr)
                self.assertNotIn(ALICE, result.stderr)


if __name__ == "__main__":
    unittest.main()
