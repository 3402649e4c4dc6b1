"""A load run of the HTTP listener on the real binary: 1,000 concurrent
Server-Sent-Event streams (one connection each, driven from one thread with
non-blocking sockets) all finish with [DONE]; 200 more clients disconnect
mid-stream and their slots are freed (each request counted CANCELLED); the
server's open file descriptors return to their count before the run and its
resident memory to within a bound of it."""
import json
import os
import resource
import selectors
import socket
import sys
import time
import unittest

import harness
import test_http

MODEL = "performer-fortunes"
STREAMS = 1000
DISCONNECTS = 200
TOKENS = 8


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def request_bytes(i):
    body = json.dumps({"model": MODEL, "prompt": "Q:\t%d?\nA:\t" % i, "max_tokens": TOKENS,
                       "ignore_eos": True, "stream": True}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: load\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def run_streams(port, count, disconnect_after_first_event=False, timeout=240):
    """Opens `count` connections at once, sends a streamed completion on
    each, reads every answer to its end (or, with disconnect_after_first_event,
    closes each after its first event). Returns the answers' bytes."""
    selector = selectors.DefaultSelector()
    answers = {}
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(request_bytes(i))
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ, i)
        answers[i] = b""
    open_count = count
    deadline = time.monotonic() + timeout
    while open_count > 0:
        if time.monotonic() > deadline:
            raise AssertionError("%d of %d streams did not end within %d s"
                                 % (open_count, count, timeout))
        for key, _ in selector.select(timeout=1):
            i = key.data
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            answers[i] += data
            if not data or (disconnect_after_first_event and b"data: " in answers[i]):
                selector.unregister(key.fileobj)
                key.fileobj.close()
                open_count -= 1
    selector.close()
    return answers


def setUpModule():
    # 1,000 client sockets: above the usual soft limit of 1,024 open files.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * STREAMS if hard == resource.RLIM_INFINITY else min(hard, 4 * STREAMS)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


class HttpLoadTest(unittest.TestCase):
    def test_a_thousand_streams_finish_and_resources_return(self):
        # No prefix cache: its states (256 MiB by default) would be memory
        # the run leaves behind on purpose.
        server = test_http.HttpServer(["--max_batch=64", "--max_queue=2000", "--prefix_cache_bytes=0",
                                       "--http_max_connections=5000"], name="http-load").start()
        try:
            pid = server.proc.pid
            # Warm-up: every path once, then the baseline.
            run_streams(server.http_port, 8)
            time.sleep(1)
            fds_before, rss_before = open_fds(pid), rss_bytes(pid)

            answers = run_streams(server.http_port, STREAMS)
            for i, raw in answers.items():
                self.assertTrue(raw.startswith(b"HTTP/1.1 200 OK\r\n"), raw[:200])
                self.assertTrue(raw.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"),
                                "stream %d: %r" % (i, raw[-200:]))

            cancelled_before = self.cancelled(server)
            run_streams(server.http_port, DISCONNECTS, disconnect_after_first_event=True)
            deadline = time.monotonic() + 60
            while self.cancelled(server) < cancelled_before + DISCONNECTS * 0.9:
                self.assertLess(time.monotonic(), deadline,
                                "disconnected streams were not cancelled: %d of %d"
                                % (self.cancelled(server) - cancelled_before, DISCONNECTS))
                time.sleep(0.2)
            # Every slot is free again: a full batch runs at once.
            start = time.monotonic()
            answers = run_streams(server.http_port, 64)
            self.assertTrue(all(a.endswith(b"0\r\n\r\n") for a in answers.values()))
            self.assertLess(time.monotonic() - start, 60)

            # Connections closed by the server and the clients alike are gone.
            deadline = time.monotonic() + 30
            while open_fds(pid) > fds_before:
                self.assertLess(time.monotonic(), deadline,
                                "open fds %d, %d before the run" % (open_fds(pid), fds_before))
                time.sleep(0.2)
            # Freed memory goes back to the system after a burst
            # (server/process/heap_release.h); the bound allows the caches
            # (prefix cache, allocator arenas) their steady size.
            time.sleep(2)
            rss_after = rss_bytes(pid)
            sys.stderr.write("load run: open fds %d before, %d after; RSS %.0f MiB before, "
                             "%.0f MiB after\n" % (fds_before, open_fds(pid), rss_before / 2**20,
                                                   rss_after / 2**20))
            self.assertLess(rss_after, rss_before + 64 * 2**20,
                            "RSS %d MiB after, %d MiB before" % (rss_after >> 20, rss_before >> 20))
        finally:
            server.stop()

    @staticmethod
    def cancelled(server):
        return sum(harness.metric_values(server.metrics(), "performer_requests_total",
                                         protocol="openai", method="completions",
                                         code="CANCELLED"))


if __name__ == "__main__":
    unittest.main()
