#!/usr/bin/env python3
"""Sessions across replicas: what routing and moving a session cost a turn.

Replicas of the default model (models/performer-fortunes) on this machine,
measured from a grpcio client, each figure the median over --turns turns
(one session turn at a time, a short message, --new_tokens greedy tokens):

  direct      time to first token of a session turn sent to the replica
              that holds the session;
  proxy       the same turn through HAProxy (deploy/haproxy/haproxy.cfg,
              consistent hash on x-session-id) in front of the replicas;
  peer move   a turn sent to a replica that does not hold the session: it
              takes it from its peer (TakeSession), imports it, then runs it;
  persist     a whole turn (to the last token) with --session_persist
              against the same replica without it, and the writes made.

Every figure is printed with its ratio to `direct` from the same run, so the
numbers compare on a shared, noisy machine. Needs the built performer-serve
(PERFORMER_SERVE or build/server/performer-serve), the Python stubs on
PYTHONPATH (build/python) and haproxy (Debian's package).

    PYTHONPATH=build/python python3 bench/session_routing_bench.py --turns 40
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration", "python"))

import harness  # noqa: E402
from harness import pb  # noqa: E402
from proxy import Proxy, free_port  # noqa: E402
import test_scale_out  # noqa: E402  (its messages)

MODEL = "performer-fortunes"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--new_tokens", type=int, default=8)
    return p.parse_args()


def timed_turn(stub, session, prompt, create, new_tokens):
    """(time to first token, total) of one streamed turn, in seconds."""
    request = harness.request(MODEL, prompt=prompt, max_new_tokens=new_tokens, temperature=0.0,
                              session_id=session, create_session=create)
    start = time.perf_counter()
    first = None
    for _ in stub.GenerateStream(request, timeout=120, metadata=(("x-session-id", session),)):
        if first is None:
            first = time.perf_counter() - start
    return first, time.perf_counter() - start


def replica(name, port, ports, spill, *flags):
    return harness.MetricsServer(
        test_scale_out.REPO_MODELS,
        ("--port=%d" % port, "--max_batch=8", "--state_spill_dir=" + spill,
         "--session_peers=" + ",".join("127.0.0.1:%d" % p for p in ports)) + flags, name).start()


def main():
    args = parse_args()
    ports = [free_port() for _ in range(2)]
    spill = harness.make_temp_dir("bench-spill")
    a = replica("bench-a", ports[0], ports, spill)
    b = replica("bench-b", ports[1], ports, spill)
    persisting = replica("bench-persist", free_port(), [], harness.make_temp_dir(
        "bench-persist"), "--session_persist")
    proxy = Proxy([a.address, b.address, a.address])
    results = {"direct": [], "proxy": [], "peer move": [], "turn": [], "turn, persist": []}
    try:
        proxy.wait_up(["r1", "r2", "r3"])
        for i in range(args.turns):
            session = "bench-%d" % i
            timed_turn(a.stub, session, test_scale_out.message(i, 0), True, args.new_tokens)
            results["direct"].append(timed_turn(a.stub, session, test_scale_out.message(i, 1),
                                                False, args.new_tokens)[0])
            results["peer move"].append(timed_turn(b.stub, session, test_scale_out.message(i, 2),
                                                   False, args.new_tokens)[0])
            # Through the proxy: whichever replica the hash picks takes it
            # first (one move); the timed turn is the next one.
            timed_turn(proxy.stub, session, test_scale_out.message(i, 3), False, args.new_tokens)
            results["proxy"].append(timed_turn(proxy.stub, session, test_scale_out.message(i, 4),
                                               False, args.new_tokens)[0])
            for name, server in (("turn", a), ("turn, persist", persisting)):
                own = "%s-%s" % (session, server.name)
                timed_turn(server.stub, own, test_scale_out.message(i, 0), True, args.new_tokens)
                results[name].append(timed_turn(server.stub, own, test_scale_out.message(i, 1),
                                                False, args.new_tokens)[1])
        written = sum(harness.metric_values(persisting.metrics(),
                                            "performer_sessions_persisted_total"))
        moved = sum(harness.metric_values(b.metrics(), "performer_sessions_moved_total",
                                          direction="in"))
    finally:
        proxy.stop()
        for server in (a, b, persisting):
            server.stop()
    base = statistics.median(results["direct"])
    print("session turns, %d each, %d new tokens; median ms (ratio to direct TTFT)"
          % (args.turns, args.new_tokens))
    for name in ("direct", "proxy", "peer move"):
        m = statistics.median(results[name])
        print("  TTFT %-10s %7.2f ms  (%.2fx)" % (name, 1000 * m, m / base))
    plain = statistics.median(results["turn"])
    for name in ("turn", "turn, persist"):
        m = statistics.median(results[name])
        print("  whole %-13s %7.2f ms  (%.2fx of a turn without persist)"
              % (name, 1000 * m, m / plain))
    print("  sessions moved in to the peer: %d; files persisted: %d" % (moved, written))


if __name__ == "__main__":
    sys.exit(main())
