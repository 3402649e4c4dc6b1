#!/usr/bin/env python3
"""Load and fault run of the real performer-serve on loopback, bounded in
time and stopping by itself (tools/chaos.sh runs it; ctest runs a short
form under the `chaos` label).

Phases, each followed by a check that the server is back at idle (no slot
busy, nothing queued, open fds at their idle count):
  overload   4x capacity (slots + queue) of closed-loop clients for
             --overload_seconds: every request completes with its reference
             tokens or gets RESOURCE_EXHAUSTED within --refusal_bound_ms.
  cancels    --cancels calls ended early: streams cancelled at a random
             point, unary calls whose deadline passes, and clients in child
             processes killed with SIGKILL mid-stream (vanished clients).
  soak       a steady load of `capacity` clients for --soak_seconds; RSS and
             open fds sampled each second, their slopes reported.
  sigterm    a full server (every slot and queue place taken) gets SIGTERM:
             every request holding a slot completes (0 lost), every queued
             one gets UNAVAILABLE at once (its client retries elsewhere
             rather than wait out the drain), new ones get UNAVAILABLE, the
             process exits 0.
  sigkill    SIGKILL under load, then a restart on the same port: clients
             see UNAVAILABLE and their retries succeed.

Prints a Markdown table of figures; exit status 0 when every check held.
Needs the generated stubs on PYTHONPATH (<build>/python) and the
integration harness (tests/integration/python).
"""

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration", "python"))

import grpc  # noqa: E402

import harness  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from harness import pb, pb_grpc  # noqa: E402

MODEL = "lm_causal_default"  # vocab 100, max_seq_len 48
SLOTS = 4
QUEUE = 4
CAPACITY = SLOTS + QUEUE
PROMPTS = [[1 + (i * 7 + j) % 97 for j in range(2 + i % 5)] for i in range(16)]
NEW_TOKENS = 24
# The SIGTERM phase's requests: long enough that the drain is still running
# when the late request arrives.
DRAIN_TOKENS = 40


def request(i, **fields):
    return harness.request(MODEL, PROMPTS[i % len(PROMPTS)], max_new_tokens=NEW_TOKENS,
                           temperature=0.0, ignore_eos=True, **fields)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FixedPortServer(harness.MetricsServer):
    """A MetricsServer on a chosen gRPC port, so that a restart keeps it."""

    def __init__(self, repository_dir, port, flags, name):
        super().__init__(repository_dir, flags, name)
        self.fixed_port = port

    def command(self):
        return [("--port=%d" % self.fixed_port) if a == "--port=0" else a
                for a in super().command()]


def proc_status(pid):
    """(RSS in KiB, open fds) of process `pid`."""
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def slope(samples):
    """Least-squares slope of [(t, value)] per second."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    den = sum((t - mt) ** 2 for t, _ in samples)
    return sum((t - mt) * (v - mv) for t, v in samples) / den if den else 0.0


class Run:
    def __init__(self, args):
        self.args = args
        self.failures = []
        self.rows = []  # (phase, figure, value)
        repo = harness.ModelRepository("chaos")
        repo.add_required(MODEL)
        self.repo_dir = repo.dir
        self.port = free_port()
        self.flags = ("--default_model=%s" % MODEL, "--max_batch=%d" % SLOTS,
                      "--max_queue=%d" % QUEUE, "--step_delay_ms=%d" % args.step_delay_ms,
                      "--drain_timeout=60s")
        self.server = None
        self.reference = {}

    def check(self, condition, message):
        if not condition:
            self.failures.append(message)
            print("FAIL: " + message, flush=True)

    def figure(self, phase, name, value):
        self.rows.append((phase, name, value))
        print("%-9s %-44s %s" % (phase, name, value), flush=True)

    def start(self):
        self.server = FixedPortServer(self.repo_dir, self.port, self.flags, "chaos").start()
        self.stub = self.server.stub

    def model_counts(self):
        info = self.stub.GetModel(pb.GetModelRequest(name=MODEL), timeout=10)
        return info.active_sequences, info.queued_requests

    def wait_idle(self, phase, idle_fds):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            active, queued = self.model_counts()
            rss, fds = proc_status(self.server.proc.pid)
            if active == 0 and queued == 0 and fds <= idle_fds:
                break
            time.sleep(0.2)
        active, queued = self.model_counts()
        rss, fds = proc_status(self.server.proc.pid)
        self.check(active == 0 and queued == 0,
                   "%s: %d active, %d queued after the phase" % (phase, active, queued))
        self.check(fds <= idle_fds, "%s: %d fds open after the phase, %d at idle"
                   % (phase, fds, idle_fds))
        self.figure(phase, "after: slots busy / queued / fds / RSS MiB",
                    "%d / %d / %d (idle %d) / %.1f" % (active, queued, fds, idle_fds, rss / 1024))

    # -- phases ----------------------------------------------------------
    def references(self):
        for i in range(len(PROMPTS)):
            self.reference[i % len(PROMPTS)] = list(self.stub.Generate(request(i),
                                                                       timeout=60).token_ids)

    def overload(self):
        stop = time.monotonic() + self.args.overload_seconds
        lock = threading.Lock()
        counts = {"ok": 0, "refused": 0, "wrong": 0, "other": 0}
        refusal_ms = []

        def client(k):
            rng = random.Random(k)
            stub = pb_grpc.GenerationStub(self.server.channel)
            while time.monotonic() < stop:
                i = rng.randrange(len(PROMPTS))
                start = time.monotonic()
                try:
                    if rng.random() < 0.5:
                        tokens = list(stub.Generate(request(i), timeout=120).token_ids)
                    else:
                        tokens = [t for m in stub.GenerateStream(request(i), timeout=120)
                                  for t in m.token_ids]
                    with lock:
                        counts["ok" if tokens == self.reference[i] else "wrong"] += 1
                except grpc.RpcError as e:
                    with lock:
                        if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                            counts["refused"] += 1
                            refusal_ms.append((time.monotonic() - start) * 1000)
                        else:
                            counts["other"] += 1
                            print("overload: %s %s" % (e.code(), e.details()), flush=True)
                    # As a well-behaved client does: back off by the server's
                    # hint, with jitter.
                    hint_ms = dict(e.trailing_metadata() or ()).get("grpc-retry-pushback-ms")
                    time.sleep(rng.uniform(0, min(int(hint_ms or 20), 500)) / 1000)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4 * CAPACITY)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.args.overload_seconds + 180)
        refusal_ms.sort()
        worst = refusal_ms[-1] if refusal_ms else 0.0
        p99 = refusal_ms[int(0.99 * (len(refusal_ms) - 1))] if refusal_ms else 0.0
        self.figure("overload", "clients / seconds", "%d / %d" % (4 * CAPACITY,
                                                                  self.args.overload_seconds))
        self.figure("overload", "completed (reference tokens) / wrong / refused / other",
                    "%d / %d / %d / %d" % (counts["ok"], counts["wrong"], counts["refused"],
                                           counts["other"]))
        self.figure("overload", "refusal latency p99 / max ms", "%.1f / %.1f" % (p99, worst))
        self.check(counts["wrong"] == 0, "overload: %d completions differ from their reference"
                   % counts["wrong"])
        self.check(counts["other"] == 0, "overload: %d calls ended with another status"
                   % counts["other"])
        self.check(counts["ok"] > 0 and counts["refused"] > 0,
                   "overload: expected completions and refusals, got %s" % counts)
        self.check(worst <= self.args.refusal_bound_ms, "overload: a refusal took %.0f ms (bound "
                   "%d ms)" % (worst, self.args.refusal_bound_ms))

    def cancels(self):
        rng = random.Random(7)
        total = self.args.cancels
        vanished_children = max(1, total // 50)
        per_child = 2
        ended = {"cancelled": 0, "deadline": 0, "completed": 0, "refused": 0, "other": 0}
        lock = threading.Lock()

        def cancelled_stream(i):
            call = self.stub.GenerateStream(request(i), timeout=60)
            timer = threading.Timer(rng.uniform(0, 0.08), call.cancel)
            timer.start()
            try:
                for _ in call:
                    pass
                key = "completed"
            except grpc.RpcError as e:
                key = {grpc.StatusCode.CANCELLED: "cancelled",
                       grpc.StatusCode.RESOURCE_EXHAUSTED: "refused"}.get(e.code(), "other")
            timer.cancel()
            return key

        def expiring_unary(i):
            try:
                self.stub.Generate(request(i), timeout=rng.uniform(0.001, 0.08))
                return "completed"
            except grpc.RpcError as e:
                return {grpc.StatusCode.DEADLINE_EXCEEDED: "deadline",
                        grpc.StatusCode.RESOURCE_EXHAUSTED: "refused"}.get(e.code(), "other")

        def one(i):
            # A refused call (the vanished clients may hold the slots) is
            # retried, so that every one of them ends early for real.
            for _ in range(500):
                key = (cancelled_stream if i % 2 else expiring_unary)(i)
                if key != "refused":
                    break
                with lock:
                    ended["refused"] += 1
                time.sleep(0.01)
            with lock:
                ended[key] += 1

        in_process = total - vanished_children * per_child
        pending = list(range(in_process))
        workers = []

        def worker():
            while True:
                with lock:
                    if not pending:
                        return
                    i = pending.pop()
                one(i)

        for _ in range(SLOTS):
            workers.append(threading.Thread(target=worker))
            workers[-1].start()
        # Vanished clients: child processes with streams open, killed.
        children = []
        for c in range(vanished_children):
            children.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--vanishing_client",
                 self.server.address, "--streams=%d" % per_child],
                env=os.environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for child in children:
            time.sleep(rng.uniform(0.05, 0.3))
            child.send_signal(signal.SIGKILL)
        for child in children:
            child.wait(30)
        for w in workers:
            w.join(300)
        self.figure("cancels", "ended early: cancelled / deadline / vanished",
                    "%d / %d / %d" % (ended["cancelled"], ended["deadline"],
                                      vanished_children * per_child))
        self.figure("cancels", "completed before the cancel / refused then retried / other",
                    "%d / %d / %d" % (ended["completed"], ended["refused"], ended["other"]))
        self.check(ended["other"] == 0,
                   "cancels: %d calls ended with an unexpected status" % ended["other"])

    def soak(self, idle):
        stop = time.monotonic() + self.args.soak_seconds
        samples_rss, samples_fds = [], []
        errors = []

        def client(k):
            stub = pb_grpc.GenerationStub(self.server.channel)
            while time.monotonic() < stop:
                try:
                    stub.Generate(request(k), timeout=60)
                except grpc.RpcError as e:
                    errors.append(e.code())

        threads = [threading.Thread(target=client, args=(k,)) for k in range(SLOTS)]
        for t in threads:
            t.start()
        t0 = time.monotonic()
        while time.monotonic() < stop:
            rss, fds = proc_status(self.server.proc.pid)
            now = time.monotonic() - t0
            samples_rss.append((now, rss / 1024))
            samples_fds.append((now, fds))
            time.sleep(1)
        for t in threads:
            t.join(120)
        rss_slope = slope(samples_rss) * 60
        fd_slope = slope(samples_fds) * 60
        self.figure("soak", "seconds / errors", "%d / %d" % (self.args.soak_seconds, len(errors)))
        self.figure("soak", "RSS slope MiB/min / fd slope per min",
                    "%.2f / %.2f" % (rss_slope, fd_slope))
        self.figure("soak", "RSS MiB first / last sample", "%.1f / %.1f"
                    % (samples_rss[0][1], samples_rss[-1][1]))
        self.check(not errors, "soak: %d errors" % len(errors))
        self.check(fd_slope < 1.0, "soak: open fds grow by %.2f per minute" % fd_slope)

    def sigterm(self):
        results = [None] * CAPACITY
        ended = [None] * CAPACITY  # seconds after SIGTERM
        started = threading.Barrier(CAPACITY + 1)
        sigterm_at = [None]

        def client(k):
            started.wait(30)
            try:
                req = request(k)
                req.max_new_tokens = DRAIN_TOKENS
                tokens = [t for m in self.stub.GenerateStream(req, timeout=120)
                          for t in m.token_ids]
                results[k] = "ok" if len(tokens) == DRAIN_TOKENS else "short"
            except grpc.RpcError as e:
                results[k] = str(e.code())
            if sigterm_at[0] is not None:
                ended[k] = time.monotonic() - sigterm_at[0]

        threads = [threading.Thread(target=client, args=(k,)) for k in range(CAPACITY)]
        for t in threads:
            t.start()
        started.wait(30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum(self.model_counts()) < CAPACITY:
            time.sleep(0.005)
        sigterm_at[0] = time.monotonic()
        self.server.signal(signal.SIGTERM)
        # Once the server reports NOT_SERVING it is draining.
        health = health_pb2_grpc.HealthStub(self.server.channel)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status = health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
            if status == health_pb2.HealthCheckResponse.NOT_SERVING:
                break
            time.sleep(0.002)
        try:
            self.stub.Generate(request(0), timeout=10)
            late = "OK"
        except grpc.RpcError as e:
            late = str(e.code())
        for t in threads:
            t.join(120)
        code = self.server.wait(60)
        completed = [k for k, r in enumerate(results) if r == "ok"]
        refused = [k for k, r in enumerate(results) if r == "StatusCode.UNAVAILABLE"]
        lost = CAPACITY - len(completed) - len(refused)
        completed_at = max((ended[k] or 0.0) for k in completed) if completed else 0.0
        refused_at = max((ended[k] or 0.0) for k in refused) if refused else 0.0
        self.figure("sigterm", "admitted / completed / refused while queued / lost",
                    "%d / %d / %d / %d" % (CAPACITY, len(completed), len(refused), lost))
        self.figure("sigterm", "last queued refusal / last completion, s after SIGTERM",
                    "%.2f / %.2f" % (refused_at, completed_at))
        self.figure("sigterm", "a request after SIGTERM / exit code", "%s / %s" % (late, code))
        self.check(lost == 0, "sigterm: requests lost: %s" % results)
        self.check(len(completed) >= SLOTS,
                   "sigterm: a request holding a slot did not complete: %s" % results)
        # The queue was full at SIGTERM: its requests are refused, not served
        # (a request admitted meanwhile, as a slot freed, may complete).
        self.check(len(refused) >= 1, "sigterm: no queued request was refused: %s" % results)
        self.check(not refused or refused_at < completed_at,
                   "sigterm: queued requests waited for the drain (refused %.2f s, last "
                   "completion %.2f s after SIGTERM)" % (refused_at, completed_at))
        self.check(late == "StatusCode.UNAVAILABLE", "sigterm: a new request got %s" % late)
        self.check(code == 0, "sigterm: exit code %s" % code)

    def sigkill(self):
        self.start()
        seen = {"unavailable": 0, "retried_ok": 0, "other": 0}
        lock = threading.Lock()
        killed = threading.Event()

        def client(k):
            channel = grpc.insecure_channel(self.server.address)
            stub = pb_grpc.GenerationStub(channel)
            for attempt in range(200):
                try:
                    tokens = [t for m in stub.GenerateStream(request(k), timeout=30)
                              for t in m.token_ids]
                    if killed.is_set() and attempt > 0:
                        with lock:
                            seen["retried_ok" if tokens == self.reference[k % len(PROMPTS)]
                                 else "other"] += 1
                        return
                    if killed.is_set():
                        return
                except grpc.RpcError as e:
                    with lock:
                        if e.code() == grpc.StatusCode.UNAVAILABLE:
                            seen["unavailable"] += 1
                        elif e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                            seen["other"] += 1
                    time.sleep(0.1)
            channel.close()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(SLOTS)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        self.server.proc.send_signal(signal.SIGKILL)
        self.server.proc.wait(30)
        killed.set()
        time.sleep(0.5)
        self.start()
        for t in threads:
            t.join(120)
        self.figure("sigkill", "UNAVAILABLE seen / retries that succeeded / other",
                    "%d / %d / %d" % (seen["unavailable"], seen["retried_ok"], seen["other"]))
        self.check(seen["unavailable"] > 0, "sigkill: no client saw UNAVAILABLE")
        self.check(seen["retried_ok"] == SLOTS, "sigkill: %d of %d clients succeeded on retry"
                   % (seen["retried_ok"], SLOTS))
        self.check(seen["other"] == 0, "sigkill: %d unexpected results" % seen["other"])

    def run(self):
        self.start()
        try:
            self.references()
            time.sleep(0.5)
            idle_rss, idle_fds = proc_status(self.server.proc.pid)
            self.figure("idle", "RSS MiB / fds", "%.1f / %d" % (idle_rss / 1024, idle_fds))
            self.overload()
            self.wait_idle("overload", idle_fds)
            self.cancels()
            self.wait_idle("cancels", idle_fds)
            self.soak(idle_fds)
            self.wait_idle("soak", idle_fds)
            self.sigterm()
            self.sigkill()
            self.server.stop()
        finally:
            harness.cleanup()
        print("\n| phase | figure | value |\n|---|---|---|")
        for phase, name, value in self.rows:
            print("| %s | %s | %s |" % (phase, name, value))
        if self.failures:
            print("\n%d check(s) failed:\n  %s" % (len(self.failures),
                                                  "\n  ".join(self.failures)))
            return 1
        print("\nevery check held")
        return 0


def vanishing_client(address, streams):
    """Opens `streams` streams and reads them until killed."""
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.GenerationStub(channel)
    calls = [stub.GenerateStream(request(i), timeout=60) for i in range(streams)]
    for call in calls:
        try:
            for _ in call:
                pass
        except grpc.RpcError:
            pass
    time.sleep(60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--overload_seconds", type=int, default=60)
    parser.add_argument("--cancels", type=int, default=1000)
    parser.add_argument("--soak_seconds", type=int, default=120)
    parser.add_argument("--step_delay_ms", type=int, default=2)
    parser.add_argument("--refusal_bound_ms", type=int, default=1000)
    parser.add_argument("--vanishing_client", metavar="ADDRESS")
    parser.add_argument("--streams", type=int, default=10)
    args = parser.parse_args()
    if args.vanishing_client:
        vanishing_client(args.vanishing_client, args.streams)
        return 0
    return Run(args).run()


if __name__ == "__main__":
    sys.exit(main())
