"""HTTP/2 attacks that Debian 12's gRPC (1.51) cannot stop itself, each
against the topology that withstands it (docs/reliability.md, "Attacks
below our code"), with the attack clients of http2_attacks.py:

* through HAProxy (deploy/haproxy/haproxy.cfg, the supported topology): a
  CONTINUATION flood is cut at the proxy, and a rapid-reset flood is held
  to the proxy's per-client request rate; the replica's memory grows by
  less than 128 MB and it answers other clients throughout;
* on the bare port: a gzip bomb is refused before it is inflated (identity
  compression only); the memory a reset flood made the server hold is
  returned once the flood is over; a listener that stopped accepting after
  the open-file limit was hit turns liveness NOT_SERVING.
"""

import os
import threading
import time
import unittest

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

import harness
import http2_attacks
from proxy import Proxy, free_port

MODEL = "performer-fortunes"
REPO_MODELS = os.path.join(harness.REPO, "models")
GROWTH_LIMIT_KB = 128 << 10
# The attacker's source address: the proxy's per-client rate applies to it
# and not to the well-behaved client on 127.0.0.1.
ATTACKER = "127.0.0.2"


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


class Background(threading.Thread):
    """Runs tick() every `interval` seconds while the with-block runs."""

    def __init__(self, interval):
        super().__init__(daemon=True)
        self.interval = interval
        self._done = threading.Event()

    def run(self):
        while not self._done.wait(self.interval):
            self.tick()

    def tick(self):
        raise NotImplementedError

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self.join()


class PeakRss(Background):
    """A process's resident memory, sampled every 20 ms: its peak."""

    def __init__(self, pid):
        super().__init__(0.02)
        self.pid = pid
        self.before = rss_kb(pid)
        self.peak = self.before

    def tick(self):
        self.peak = max(self.peak, rss_kb(self.pid))

    @property
    def growth(self):
        return self.peak - self.before


class Answering(Background):
    """A well-behaved client: a short generation every 200 ms; counts the
    answers and keeps every failure."""

    def __init__(self, stub):
        super().__init__(0.2)
        self.stub = stub
        self.answered = 0
        self.failures = []

    def tick(self):
        try:
            self.stub.Generate(harness.request(MODEL, prompt=b"Q: why?\nA:", max_new_tokens=2,
                                               temperature=0.0), timeout=20)
            self.answered += 1
        except grpc.RpcError as e:
            self.failures.append((e.code(), e.details()))


class ProxiedAttackTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.replica = harness.MetricsServer(REPO_MODELS, ("--max_batch=8",), "attacked").start()
        closed = ["127.0.0.1:%d" % free_port() for _ in range(2)]
        cls.proxy = Proxy([cls.replica.address] + closed)
        cls.proxy.wait_up(["r1"])
        # r2 and r3 start UP until their checks fail: a request the proxy
        # sends there before is refused and may come back as a 503.
        cls.proxy.wait_down(["r2", "r3"])

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.replica.stop()

    def frontend_denied(self):
        """Requests the proxy's frontend refused (its "dreq" counter)."""
        lines = self.proxy.admin("show stat").splitlines()
        fields = lines[0].lstrip("# ").split(",")
        for line in lines[1:]:
            values = line.split(",")
            if values[:2] == ["performer_grpc", "FRONTEND"]:
                return int(values[fields.index("dreq")] or 0)
        raise AssertionError("no frontend line in:\n" + "\n".join(lines))

    def test_continuation_flood_is_cut_at_the_proxy(self):
        with Answering(self.proxy.stub) as client, PeakRss(self.replica.proc.pid) as rss:
            sent, closed = http2_attacks.continuation_flood("127.0.0.1", self.proxy.port, 256,
                                                            source=ATTACKER)
            time.sleep(1)
        self.assertTrue(closed, "the proxy let %d bytes of one header block through" % sent)
        self.assertLess(sent, 64 << 20)
        self.assertLess(rss.growth, GROWTH_LIMIT_KB)
        self.assertEqual(client.failures, [], self.proxy.log())
        self.assertGreater(client.answered, 0)

    def test_rapid_reset_flood_is_held_to_the_client_rate(self):
        denied_before = self.frontend_denied()
        with Answering(self.proxy.stub) as client, PeakRss(self.replica.proc.pid) as rss:
            streams = http2_attacks.reset_flood("127.0.0.1", self.proxy.port, 50000,
                                                source=ATTACKER)
            time.sleep(2)
        denied = self.frontend_denied() - denied_before
        self.assertEqual(streams, 50000)
        # Beyond 500 per second the proxy refuses the attacker's requests.
        self.assertGreater(denied, 25000, self.proxy.log(skip=" 429 "))
        self.assertLess(rss.growth, GROWTH_LIMIT_KB,
                        "the replica grew by %d KB" % rss.growth)
        self.assertEqual(client.failures, [], self.proxy.log(skip=" 429 "))
        self.assertGreater(client.answered, 0)


class BarePortAttackTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = harness.MetricsServer(REPO_MODELS, ("--max_batch=8",), "bare").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_gzip_bomb_is_refused_before_it_is_inflated(self):
        with PeakRss(self.server.proc.pid) as rss:
            code, details = http2_attacks.gzip_bomb("127.0.0.1", self.server.port, 128)
        self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED, details)
        self.assertIn("gzip", details)
        self.assertLess(rss.growth, 32 << 10, "the server grew by %d KB" % rss.growth)

    def test_memory_held_for_a_reset_flood_is_returned(self):
        before = rss_kb(self.server.proc.pid)
        with PeakRss(self.server.proc.pid) as rss:
            http2_attacks.reset_flood("127.0.0.1", self.server.port, 30000,
                                      path=b"/performer.v1.Nowhere/Nothing")
            time.sleep(0.5)
        # The release thread (server/process/heap_release.h, with serve_main's
        # kHeapRelease* constants) trims once the flood's frees are over and the
        # allocator's free bytes have grown by more than 16 MiB: what stays is
        # at most that plus what the server holds, so the bound is that plus a
        # margin.
        bound = before + (48 << 10)
        deadline = time.monotonic() + 20
        while rss_kb(self.server.proc.pid) > bound and time.monotonic() < deadline:
            time.sleep(0.2)
        after = rss_kb(self.server.proc.pid)
        self.assertLess(after, bound,
                        "held %d KB after the flood (peak %d KB more)" % (after - before,
                                                                          rss.growth))
        self.server.stub.Generate(harness.request(MODEL, prompt=b"Q: ok?\nA:", max_new_tokens=2),
                                  timeout=20)


class DescriptorLimitServer(harness.MetricsServer):
    """A server whose open-file limit (soft and hard) is 128."""

    def command(self):
        return ["prlimit", "--nofile=128:128", "--"] + super().command()


class ListenerStallTest(unittest.TestCase):
    def test_a_listener_that_stopped_accepting_fails_liveness(self):
        health_port = free_port()
        server = DescriptorLimitServer(REPO_MODELS, ("--health_port=%d" % health_port,
                                                     "--liveness_stall_seconds=2"),
                                       "descriptors").start()
        try:
            channel = grpc.insecure_channel("127.0.0.1:%d" % health_port)
            health = health_pb2_grpc.HealthStub(channel)

            def liveness():
                return health.Check(health_pb2.HealthCheckRequest(service="liveness"),
                                    timeout=5).status

            self.assertEqual(liveness(), health_pb2.HealthCheckResponse.SERVING)
            self.assertEqual(harness.metric_values(server.metrics(),
                                                   "performer_listeners_accepting"), [1.0])
            self.assertIn("open_files_limit=128", server.log_tail(200))
            opened = http2_attacks.exhaust_descriptors("127.0.0.1", server.port, 200)
            self.assertGreater(opened, 128)
            deadline = time.monotonic() + 30
            while (liveness() != health_pb2.HealthCheckResponse.NOT_SERVING
                   and time.monotonic() < deadline):
                time.sleep(0.5)
            self.assertEqual(liveness(), health_pb2.HealthCheckResponse.NOT_SERVING,
                             server.log_tail())
            self.assertEqual(harness.metric_values(server.metrics(),
                                                   "performer_listeners_accepting"), [0.0])
            self.assertIn("listener stopped accepting port=%d" % server.port, server.log_tail(200))
            channel.close()
        finally:
            server.kill()


if __name__ == "__main__":
    unittest.main()
