"""Sessions across replicas: no conversation is lost or silently restarted.

* three replicas of the default model behind HAProxy (deploy/haproxy/
  haproxy.cfg: consistent hashing on x-session-id) with a shared spill
  folder and each other as --session_peers; 48 concurrent conversations of
  6 turns go through the proxy while a fourth replica joins (its share of
  the ring moves to it: peer moves) and one replica gets SIGTERM (its
  sessions move to their new owners from it while it drains, or from the
  folder it spilled to). None is lost, and every turn equals, token for
  token (greedy), the same conversation run uninterrupted on one replica;
  at least 95% equal one request sending the whole history (the rest are
  near-ties that the two orders of floating-point sums decide apart).
* then a replica gets SIGKILL: the next turn of each of its conversations
  gets NOT_FOUND saying the session is not held, never a fresh session;
* two of the proxy's three replicas refuse connections from the start: each
  leaves the ring at its first refused connection, and no request fails;
* with --session_persist, a SIGKILLed replica's sessions continue exactly
  on another replica sharing the folder;
* two replicas with no proxy and no shared folder: turn 2 on the other
  replica moves the session from its peer and continues exactly; with peers
  off it is NOT_FOUND; an unknown id without create_session is NOT_FOUND.

HAProxy comes from Debian's haproxy package (tools/install_deps.sh).
"""

import os
import signal
import threading
import time
import unittest

import grpc

import harness
from harness import pb
from proxy import Proxy, free_port

MODEL = "performer-fortunes"
REPO_MODELS = os.path.join(harness.REPO, "models")
CONVERSATIONS = 48
TURNS = 6
NEW_TOKENS = 4
RPC_TIMEOUT_S = 120
# How long a turn keeps retrying UNAVAILABLE (a draining replica, a peer
# still finishing the previous turn, the proxy between health checks).
RETRY_FOR_S = 60


def message(conversation, turn):
    return list(("\nQ%d.%d: what then, friend %d?\nA:" % (conversation, turn, conversation))
                .encode())


def turn_request(session, prompt, create):
    r = harness.request(MODEL, prompt=prompt, max_new_tokens=NEW_TOKENS, temperature=0.0,
                        session_id=session, create_session=create)
    return r


def send_turn(stub, session, prompt, create, retry_for=RETRY_FOR_S):
    """One turn, retried while the answer is UNAVAILABLE; returns the
    response or raises the last grpc.RpcError."""
    deadline = time.monotonic() + retry_for
    delay = 0.05
    while True:
        try:
            return stub.Generate(turn_request(session, prompt, create), timeout=RPC_TIMEOUT_S,
                                 metadata=(("x-session-id", session),))
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


class ScaleOutTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.isdir(REPO_MODELS):
            raise AssertionError("%s is absent: the repository carries its default model"
                                 % REPO_MODELS)
        # The whole-history answers: a replica of its own, no sessions involved.
        cls.reference = harness.Server(REPO_MODELS, ("--max_batch=8",), "reference").start()

    @classmethod
    def tearDownClass(cls):
        cls.reference.stop()

    def replica(self, name, port, peers, spill, *flags):
        peer_list = ",".join("127.0.0.1:%d" % p for p in peers)
        return harness.MetricsServer(REPO_MODELS, ("--port=%d" % port, "--max_batch=16",
                                            "--session_peers=" + peer_list,
                                            "--state_spill_dir=" + spill,
                                            "--drain_timeout=30s") + flags, name)

    def whole_history(self, history):
        return list(self.reference.stub.Generate(
            harness.request(MODEL, prompt=history, max_new_tokens=NEW_TOKENS, temperature=0.0),
            timeout=RPC_TIMEOUT_S).token_ids)

    def test_conversations_survive_scale_up_sigterm_and_report_sigkill(self):
        ports = [free_port() for _ in range(4)]
        spill = harness.make_temp_dir("shared-spill")
        replicas = [self.replica("r%d" % (i + 1), ports[i], ports, spill) for i in range(4)]
        for r in replicas[:3]:
            r.start()
        proxy = Proxy(["127.0.0.1:%d" % p for p in ports])
        try:
            proxy.wait_up(["r1", "r2", "r3"])
            self.run_conversations(proxy, replicas)
            self.check_sigkill(proxy, replicas)
        finally:
            proxy.stop()
            for r in replicas:
                if r.running():
                    r.stop()

    def run_conversations(self, proxy, replicas):
        histories = {c: [] for c in range(CONVERSATIONS)}
        turns = {c: [] for c in range(CONVERSATIONS)}  # (history before, tokens)
        errors = []
        done = [0]
        lock = threading.Lock()

        def converse(c):
            session = "conv-%d" % c
            try:
                for t in range(TURNS):
                    prompt = message(c, t)
                    before = histories[c] + prompt
                    response = send_turn(proxy.stub, session, prompt, create=(t == 0))
                    tokens = list(response.token_ids)
                    self.assertEqual(response.session_position, len(before) + len(tokens))
                    turns[c].append((before, tokens))
                    histories[c] = before + tokens
                    with lock:
                        done[0] += 1
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append("conversation %d: %r" % (c, e))

        threads = [threading.Thread(target=converse, args=(c,)) for c in range(CONVERSATIONS)]
        for t in threads:
            t.start()
        total = CONVERSATIONS * TURNS

        def wait_done(count):
            deadline = time.monotonic() + 300
            while done[0] < count and not errors and time.monotonic() < deadline:
                time.sleep(0.05)

        # Scale up: r4 joins the ring; its share of the sessions moves to it.
        wait_done(total // 3)
        replicas[3].start()
        proxy.admin("enable server performer/r4")
        proxy.wait_up(["r4"])
        # A rollout step as deploy/haproxy/haproxy.cfg describes it: r2 is
        # taken out of the ring (as Kubernetes removes a terminating pod's
        # endpoint), then drains (SIGTERM) while turns keep coming.
        wait_done(total * 2 // 3)
        proxy.admin("disable server performer/r2")
        replicas[1].signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=600)
        self.assertEqual(errors, [])
        self.assertEqual(replicas[1].wait(timeout=60), 0)
        self.assertEqual(sum(len(v) for v in turns.values()), total)
        # Each conversation again, uninterrupted on one replica: moves and
        # drains must not change a single token (a lost or restarted
        # session would: its turns would miss their history).
        mismatches = []
        agree = 0
        for c in range(CONVERSATIONS):
            for t, (before, tokens) in enumerate(turns[c]):
                replayed = list(self.reference.stub.Generate(
                    turn_request("replay-%d" % c, message(c, t), t == 0),
                    timeout=RPC_TIMEOUT_S).token_ids)
                if tokens != replayed:
                    mismatches.append((c, t, tokens, replayed))
                agree += tokens == self.whole_history(before)
        self.assertEqual(mismatches, [])
        # One request with the whole history prefills the generated tokens
        # in chunks where the session fed them one step at a time: the sums'
        # order differs in the last bits, and a near-tie between two logits
        # can go the other way (docs/serving.md, "Sessions").
        self.assertGreaterEqual(agree, total * 95 // 100,
                                "turns equal to a whole-history request: %d of %d" % (agree, total))
        moved = sum(self.moved_in(r) for r in (replicas[0], replicas[2], replicas[3]))
        self.assertGreater(moved, 0, "no session moved between replicas")
        self.histories = histories

    def moved_in(self, replica):
        """Sessions the replica took from its peers (its metrics)."""
        return sum(harness.metric_values(replica.metrics(), "performer_sessions_moved_total",
                                         direction="in"))

    def check_sigkill(self, proxy, replicas):
        victim = replicas[0]
        held = []
        for c in range(CONVERSATIONS):
            try:
                victim.stub.ExportSession(pb.ExportSessionRequest(model=MODEL,
                                                                  session_id="conv-%d" % c),
                                          timeout=30)
                held.append(c)
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())
        self.assertTrue(held, "r1 holds no conversation")
        victim.kill()
        proxy.admin("disable server performer/r1")
        for c in held:
            with self.assertRaises(grpc.RpcError) as lost:
                send_turn(proxy.stub, "conv-%d" % c, message(c, TURNS), create=False)
            self.assertEqual(lost.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn("is not held by this replica", lost.exception.details())

    def test_a_replica_that_refuses_connections_leaves_at_its_first_refusal(self):
        # HAProxy starts every server UP, and a replica that dies stays in
        # the ring until two health checks fail (1-4 s). A request
        # round-robined to it, and each retry redispatched to another dead
        # one, could end as a 503. deploy/haproxy/haproxy.cfg observes the
        # connections (observe layer4): a replica's first refused connection
        # takes it out, and the retry goes to a live one.
        closed = ["127.0.0.1:%d" % free_port() for _ in range(2)]
        proxy = Proxy([self.reference.address] + closed)
        try:
            proxy.wait_up(["r1"])  # every server starts UP: only the listener
            failures = []
            for i in range(40):
                try:
                    proxy.stub.ListModels(pb.ListModelsRequest(), timeout=30)
                except grpc.RpcError as e:
                    failures.append((i, e.code(), e.details()))
            self.assertEqual(failures, [], proxy.log())
            with open(proxy.log_path, encoding="utf-8", errors="replace") as f:
                downs = [line for line in f if " is DOWN" in line]
            for server in ("r2", "r3"):
                self.assertTrue(any("performer/%s is DOWN, reason: Health analyze" % server in line
                                    for line in downs), downs)
        finally:
            proxy.stop()

    def test_persisted_sessions_survive_sigkill(self):
        ports = [free_port() for _ in range(2)]
        spill = harness.make_temp_dir("persist-spill")
        a = self.replica("persist-a", ports[0], ports, spill, "--session_persist").start()
        b = self.replica("persist-b", ports[1], ports, spill, "--session_persist").start()
        try:
            histories = {}
            for c in range(4):
                session = "kept-%d" % c
                history = []
                for t in range(2):
                    prompt = message(c, t)
                    response = send_turn(a.stub, session, prompt, create=(t == 0))
                    history = history + prompt + list(response.token_ids)
                histories[session] = history
            time.sleep(1)  # the writer thread's files (a few ms each)
            a.kill()
            for session, history in histories.items():
                prompt = message(99, 0)
                response = send_turn(b.stub, session, prompt, create=False)
                self.assertEqual(list(response.token_ids), self.whole_history(history + prompt))
                self.assertEqual(response.usage.cached_prompt_tokens, len(history) - 1)
        finally:
            b.stop()

    def test_two_replicas_move_a_session_without_proxy_or_folder(self):
        ports = [free_port() for _ in range(2)]
        a = self.replica("peer-a", ports[0], ports, harness.make_temp_dir("a-spill")).start()
        b = self.replica("peer-b", ports[1], ports, harness.make_temp_dir("b-spill")).start()
        lonely = harness.Server(REPO_MODELS, ("--max_batch=4",), "no-peers").start()
        try:
            first = message(1, 0)
            one = send_turn(a.stub, "moving", first, create=True)
            history = first + list(one.token_ids)
            second = message(1, 1)
            # No peers: the clear NOT_FOUND, never a fresh session.
            with self.assertRaises(grpc.RpcError) as missing:
                send_turn(lonely.stub, "moving", second, create=False)
            self.assertEqual(missing.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn("session moving of model %s is not held by this replica" % MODEL,
                          missing.exception.details())
            # B moves it from A and continues exactly; A no longer holds it.
            two = send_turn(b.stub, "moving", second, create=False)
            self.assertEqual(list(two.token_ids), self.whole_history(history + second))
            self.assertEqual(two.usage.cached_prompt_tokens, len(history) - 1)
            with self.assertRaises(grpc.RpcError) as gone:
                a.stub.ExportSession(pb.ExportSessionRequest(model=MODEL, session_id="moving"),
                                     timeout=30)
            self.assertEqual(gone.exception.code(), grpc.StatusCode.NOT_FOUND)
            # An unknown id without create_session.
            with self.assertRaises(grpc.RpcError) as unknown:
                send_turn(b.stub, "never-created", second, create=False)
            self.assertEqual(unknown.exception.code(), grpc.StatusCode.NOT_FOUND)
        finally:
            for server in (a, b, lonely):
                server.stop()

    def test_peers_authenticate_and_moved_sessions_keep_their_caller(self):
        alice, bob = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
        peer, plain = "peer-token-0123456789abcdef", "plain-token-0123456789abcdef"
        workdir = harness.make_temp_dir("peer-auth")
        tokens = os.path.join(workdir, "tokens")
        with open(tokens, "w") as f:
            f.write("%s alice\n%s bob\n%s replicas peer\n%s nopeer\n" % (alice, bob, peer, plain))
        peer_token, plain_token = (os.path.join(workdir, n) for n in ("peer", "plain"))
        for path, token in ((peer_token, peer), (plain_token, plain)):
            with open(path, "w") as f:
                f.write("# the token this replica presents to its peers\n%s\n" % token)
        ports = [free_port() for _ in range(3)]
        auth = ("--auth_tokens_file=" + tokens,)
        a = harness.Server(REPO_MODELS, ("--port=%d" % ports[0], "--max_batch=4") + auth,
                           "auth-a", metadata=(("authorization", "Bearer " + alice),)).start()
        b = self.replica("auth-b", ports[1], ports[:1], harness.make_temp_dir("b"),
                         "--session_peer_token_file=" + peer_token, *auth)
        b.metadata = (("authorization", "Bearer " + alice),)
        b.start()
        c = self.replica("auth-c", ports[2], ports[:1], harness.make_temp_dir("c"),
                         "--session_peer_token_file=" + plain_token, *auth)
        c.metadata = (("authorization", "Bearer " + alice),)
        c.start()

        def turn(server, token, session, prompt, create):
            return server.stub.Generate(turn_request(session, prompt, create),
                                        timeout=RPC_TIMEOUT_S,
                                        metadata=(("authorization", "Bearer " + token),
                                                  ("x-session-id", session)))
        try:
            first = message(2, 0)
            history = first + list(turn(a, alice, "chat", first, True).token_ids)
            second = message(2, 1)
            # A peer token without the "peer" permission cannot move
            # alice's session: C is refused, says so, and A keeps it.
            with self.assertRaises(grpc.RpcError) as refused:
                turn(c, alice, "chat", second, False)
            self.assertEqual(refused.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn('"peer" permission', refused.exception.details())
            # Bob's "chat" is not alice's: not found, and nothing moves.
            with self.assertRaises(grpc.RpcError) as other:
                turn(b, bob, "chat", second, False)
            self.assertEqual(other.exception.code(), grpc.StatusCode.NOT_FOUND)
            # Alice's turn on B moves her session with B's peer token.
            two = turn(b, alice, "chat", second, False)
            self.assertEqual(list(two.token_ids), self.whole_history(history + second))
            with self.assertRaises(grpc.RpcError) as gone:
                a.stub.ExportSession(pb.ExportSessionRequest(model=MODEL, session_id="chat"),
                                     timeout=30, metadata=(("authorization", "Bearer " + alice),))
            self.assertEqual(gone.exception.code(), grpc.StatusCode.NOT_FOUND)
            state = b.stub.ExportSession(pb.ExportSessionRequest(model=MODEL, session_id="chat"),
                                         timeout=30,
                                         metadata=(("authorization", "Bearer " + alice),))
            self.assertEqual(state.tokens, two.session_position)
        finally:
            for server in (a, b, c):
                server.stop()


if __name__ == "__main__":
    unittest.main()
