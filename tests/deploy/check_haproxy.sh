#!/usr/bin/env bash
# Checks deploy/haproxy/haproxy.cfg (deploy/README.md, "Scale out with
# sessions"):
#
#   file      `haproxy -c` accepts it with the environment a user sets; it
#             hashes the header the server compares with session_id
#             (server/service/generation_rpc.cc) with consistent hashing;
#             its tcp-check frames decode to an HTTP/2 gRPC call of
#             grpc.health.v1.Health/Check (service "") and it expects the
#             gRPC message HealthCheckResponse{SERVING}.
#   live      (with PERFORMER_SERVE) three replicas, peers of each other,
#             behind the proxy: the health check passes (L7OK) on each and
#             r4 is in maintenance; sessions created through the proxy each
#             stay on one replica; a fourth replica brought in through the
#             admin socket (set server addr, enable server) takes traffic,
#             and every session continues (those that now hash to it move
#             from their peer); a replica given SIGTERM while it streams
#             leaves the ring, its stream completes, and every session
#             continues on the others (from the shared spill folder); a
#             server answering NOT_SERVING, added as r5 through the socket
#             ("add server"), fails the check on its answer (L7RSP).
#
# Usage: check_haproxy.sh [PERFORMER_SERVE]   (PYTHON overrides the interpreter)
# Exit status: 0 passed; 1 a check failed; 77 haproxy (apt-get install
# haproxy) or, for the live part, Python's grpcio (python3-grpcio) is
# missing and everything else passed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
server="${1:-}"
cfg="${root}/deploy/haproxy/haproxy.cfg"

if ! command -v haproxy >/dev/null 2>&1; then
  echo "check_haproxy: SKIP: haproxy not found (apt-get install haproxy)" >&2
  exit 77
fi
[[ -z "${server}" || -x "${server}" ]] || { echo "check_haproxy: FAIL: no server binary at ${server}" >&2; exit 1; }

# Debian's interpreter first: python3-grpcio is installed for it.
python="${PYTHON:-}"
if [[ -z "${python}" ]]; then
  for candidate in /usr/bin/python3 python3; do
    if command -v "${candidate}" >/dev/null 2>&1 && "${candidate}" -c 'import grpc' 2>/dev/null; then
      python="${candidate}"
      break
    fi
  done
  python="${python:-python3}"
fi

exec "${python}" - "${root}" "${cfg}" "${server}" <<'PY'
import atexit, os, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time

ROOT, CFG, SERVER = sys.argv[1:4]
WORK = tempfile.mkdtemp(prefix="check_haproxy.")
atexit.register(shutil.rmtree, WORK, True)
children = []


def say(message):
    print(f"check_haproxy: {message}", flush=True)


def fail(message):
    print(f"check_haproxy: FAIL: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- The file ----------------------------------------------------------------------
env = dict(os.environ, PERFORMER_R1="127.0.0.1:1", PERFORMER_R2="127.0.0.1:2",
           PERFORMER_R3="127.0.0.1:3", PERFORMER_R4="127.0.0.1:4",
           PERFORMER_PROXY_BIND="127.0.0.1:8080", PERFORMER_PROXY_SOCKET=f"{WORK}/admin.sock")
checked = subprocess.run(["haproxy", "-c", "-f", CFG], env=env, capture_output=True, text=True)
if checked.returncode != 0:
    fail(f"haproxy -c rejects {CFG}:\n{checked.stdout}{checked.stderr}")
say("haproxy -c: OK")

text = open(CFG).read()
lines = [l.split("#", 1)[0].strip() for l in text.splitlines()]
source = open(os.path.join(ROOT, "server", "service", "generation_rpc.cc")).read()
header = set(re.findall(r'metadata\.find\("([\w-]*session[\w-]*)"\)', source))
if len(header) != 1:
    fail(f"cannot find the session metadata name in generation_rpc.cc ({sorted(header)})")
header = header.pop()
if f"balance hdr({header})" not in lines or "hash-type consistent" not in lines:
    fail(f"the backend does not hash the {header} header consistently "
         "(balance hdr(...), hash-type consistent)")
say(f"balance hdr({header}), hash-type consistent: OK")

sent = b"".join(bytes.fromhex(l.split()[2]) for l in lines if l.startswith("tcp-check send-binary "))
expects = [l for l in lines if l.startswith("tcp-check expect ")]
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
STATIC = {1: ":authority", 2: ":method GET", 3: ":method POST", 4: ":path /", 6: ":scheme http",
          7: ":scheme https", 31: "content-type"}


def hpack_int(data, i, bits):
    value = data[i] & ((1 << bits) - 1)
    i += 1
    if value == (1 << bits) - 1:
        shift = 0
        while True:
            value += (data[i] & 0x7F) << shift
            shift += 7
            i += 1
            if not data[i - 1] & 0x80:
                break
    return value, i


def hpack_string(data, i):
    if data[i] & 0x80:
        fail("the health check's HPACK uses Huffman coding, which this check does not decode")
    length, i = hpack_int(data, i, 7)
    return data[i:i + length].decode(), i + length


def decode_headers(block):
    fields, i = {}, 0
    while i < len(block):
        if block[i] & 0x80:  # indexed
            index, i = hpack_int(block, i, 7)
            name, _, value = STATIC[index].partition(" ")
        else:  # literal without indexing (0000xxxx) or with (01xxxxxx)
            bits = 6 if block[i] & 0x40 else 4
            index, i = hpack_int(block, i, bits)
            name = STATIC[index].split(" ")[0] if index else None
            if name is None:
                name, i = hpack_string(block, i)
            value, i = hpack_string(block, i)
        fields[name] = value
    return fields


if not sent.startswith(PREFACE):
    fail("the health check does not start with the HTTP/2 connection preface")
frames, i = [], len(PREFACE)
while i < len(sent):
    length = int.from_bytes(sent[i:i + 3], "big")
    frames.append((sent[i + 3], sent[i + 4], int.from_bytes(sent[i + 5:i + 9], "big") & 0x7FFFFFFF,
                   sent[i + 9:i + 9 + length]))
    i += 9 + length
kinds = [f[0] for f in frames]
if kinds != [4, 1, 0] or frames[1][2] != 1 or frames[2][2] != 1:
    fail(f"the health check's frames are {kinds}: expected SETTINGS, HEADERS and DATA on stream 1")
fields = decode_headers(frames[1][3])
wanted = {":method": "POST", ":scheme": "http", ":path": "/grpc.health.v1.Health/Check",
          "content-type": "application/grpc", "te": "trailers"}
if any(fields.get(k) != v for k, v in wanted.items()) or not frames[1][1] & 0x4:
    fail(f"the health check's HEADERS are {fields} (flags {frames[1][1]}): expected {wanted}, "
         "END_HEADERS")
if frames[2][3] != b"\0\0\0\0\0" or not frames[2][1] & 0x1:
    fail(f"the health check's DATA is {frames[2][3].hex()}: expected an empty HealthCheckRequest "
         "(service \"\") ending the stream")
if not any(re.search(r" binary 00000000020801( |$)", e) for e in expects):
    fail("no tcp-check expect of the gRPC message HealthCheckResponse{SERVING} (00000000020801)")
say("health check: HTTP/2 POST /grpc.health.v1.Health/Check (service \"\"), expects SERVING: OK")

if not SERVER:
    say("OK (no server binary given: the live part did not run)")
    raise SystemExit(0)
try:
    import grpc
except ImportError:
    say("SKIP: Python grpcio (python3-grpcio): the live part did not run")
    raise SystemExit(77)


# --- Live ------------------------------------------------------------------------
def admin(command):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(f"{WORK}/admin.sock")
        s.sendall(command.encode() + b"\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out.decode()


def states():
    rows = [l.split(",") for l in admin("show stat").splitlines() if l.startswith("performer,r")]
    return {r[1]: (r[17], r[36]) for r in rows}  # name -> (status, check status)


def wait_for(what, predicate, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    fail(f"{what} (servers: {states()})")


ports = [free_port() for _ in range(4)]
peers = ",".join(f"127.0.0.1:{p}" for p in ports)


def start_replica(n):
    port_file = f"{WORK}/r{n}.port"
    process = subprocess.Popen(
        [SERVER, f"--model_repository={ROOT}/models", "--host=127.0.0.1", f"--port={ports[n - 1]}",
         "--metrics_port=-1", "--intra_op_threads=1", f"--port_file={port_file}",
         f"--session_peers={peers}", f"--state_spill_dir={WORK}/spill", "--log_level=warn"],
        stdout=subprocess.DEVNULL, stderr=open(f"{WORK}/r{n}.log", "w"))
    children.append(process)
    deadline = time.time() + 120
    while not (os.path.exists(port_file) and open(port_file).read().strip()):
        if process.poll() is not None or time.time() > deadline:
            fail(f"replica r{n} did not start: {open(f'{WORK}/r{n}.log').read()}")
        time.sleep(0.1)
    return process


def varint(n):
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def request(prompt, session, create=False, tokens=8, ignore_eos=False):
    body = b"\x1a" + varint(len(prompt)) + prompt + b"\x38" + varint(tokens)
    body += b"\x78\x01" if ignore_eos else b""  # ignore_eos = 15
    body += b"\x92\x01" + varint(len(session)) + session.encode()  # session_id = 18
    return body + (b"\x98\x01\x01" if create else b"")  # create_session = 19


try:
    replicas = {n: start_replica(n) for n in (1, 2, 3)}
    start_replica(4)
    proxy_port = free_port()
    env.update(PERFORMER_R1=f"127.0.0.1:{ports[0]}", PERFORMER_R2=f"127.0.0.1:{ports[1]}",
               PERFORMER_R3=f"127.0.0.1:{ports[2]}", PERFORMER_R4="127.0.0.1:1",
               PERFORMER_PROXY_BIND=f"127.0.0.1:{proxy_port}")
    log = open(f"{WORK}/haproxy.log", "w+")
    children.append(subprocess.Popen(["haproxy", "-db", "-f", CFG], env=env, stdout=log,
                                     stderr=subprocess.STDOUT))
    wait_for("the proxy did not start", lambda: os.path.exists(f"{WORK}/admin.sock"))
    wait_for("r1..r3 did not pass the gRPC health check",
             lambda: all(states().get(f"r{n}") == ("UP", "L7OK") for n in (1, 2, 3)))
    if states()["r4"][0] != "MAINT":
        fail(f"r4 is not in maintenance at start: {states()['r4']}")
    say("r1..r3 UP by the gRPC health check (L7OK), r4 in maintenance: OK")

    channel = grpc.insecure_channel(f"127.0.0.1:{proxy_port}")
    generate = channel.unary_unary("/performer.v1.Generation/Generate")

    def turn(session, create=False):
        logged[0] += 1
        try:
            generate(request(b"Q: why? A:", session, create), timeout=60,
                     metadata=[(header, session)])
        except grpc.RpcError as error:
            fail(f"a turn of session {session} through the proxy: {error.code().name}: "
                 f"{error.details()}")

    logged = [0]  # Generate requests sent through the proxy

    def routed(count):
        """Servers of the last `count` Generate requests in the proxy's log."""
        deadline = time.time() + 10
        while True:
            log.seek(0)
            served = re.findall(r" performer/(r\d) .*\"POST \S*/performer\.v1\.Generation/Generate ",
                                log.read())
            if len(served) >= logged[0] or time.time() > deadline:
                return served[-count:]
            time.sleep(0.1)

    sessions = [f"conversation-{i}" for i in range(24)]
    for session in sessions:
        turn(session, create=True)
    first = routed(len(sessions))
    for session in sessions:
        turn(session)
    if routed(len(sessions)) != first:
        fail(f"a session's turns went to different replicas: {first} then {routed(len(sessions))}")
    say(f"{len(sessions)} sessions, two turns each, each on one replica "
        f"({', '.join(f'{r}: {first.count(r)}' for r in sorted(set(first)))}): OK")

    admin(f"set server performer/r4 addr 127.0.0.1 port {ports[3]}")
    admin("enable server performer/r4")
    wait_for("r4 did not come up", lambda: states()["r4"] == ("UP", "L7OK"))
    for session in sessions:
        turn(session)
    after = routed(len(sessions))
    moved = sum(1 for a, b in zip(first, after) if a != b)
    if "r4" not in after or any(a != b and b != "r4" for a, b in zip(first, after)):
        fail(f"with r4 in, sessions went {first} -> {after}: only moves to r4 were expected")
    say(f"r4 brought in through the admin socket: {moved} sessions moved to it, every session "
        "continued: OK")

    victim = first[0] if first[0] != "r4" else "r1"
    victim_session = next(s for s, r in zip(sessions, after) if r == victim)
    result = {}

    def long_stream():
        call = direct_stream(request(b"Once upon a time", f"{victim}-stream", create=True, tokens=2000,
                                     ignore_eos=True),
                      timeout=120, metadata=[(header, f"{victim}-stream")])
        try:
            result["messages"] = sum(1 for _ in call)
            result["code"] = call.code()
        except grpc.RpcError as error:
            result["code"] = error.code()
            result["details"] = error.details()

    # A stream on the victim, directly (the proxy would hash its id anywhere).
    direct = grpc.insecure_channel(f"127.0.0.1:{ports[int(victim[1]) - 1]}")
    direct_stream = direct.unary_stream("/performer.v1.Generation/GenerateStream")
    streaming = threading.Thread(target=long_stream)
    streaming.start()
    time.sleep(0.3)
    replicas[int(victim[1])].send_signal(signal.SIGTERM)
    sigterm = time.time()
    wait_for(f"{victim} did not leave the ring after SIGTERM",
             lambda: states()[victim][0] == "DOWN", timeout=10)
    down_after = time.time() - sigterm
    streaming.join(120)
    if result.get("code") != grpc.StatusCode.OK:
        fail(f"the stream running on {victim} at SIGTERM ended with {result}")
    for session in sessions:
        turn(session)
    log.seek(0)
    reason = re.findall(rf"Server performer/{victim} is DOWN, reason: ([^,]*)", log.read())
    say(f"SIGTERM on {victim}: out of the ring after {down_after:.1f} s ({reason[-1]}), its stream "
        f"completed ({result['messages']} messages), every session continued (those of {victim} "
        f"too, e.g. {victim_session}): OK")

    # NOT_SERVING: a gRPC server answering the health check with status 2
    # leaves the ring on the check's content (L7RSP), not on a timeout. It
    # is added as r5 with weight 0 (no traffic), the way the file describes.
    from concurrent import futures

    class NotServing(grpc.GenericRpcHandler):
        def service(self, details):
            if details.method == "/grpc.health.v1.Health/Check":
                return grpc.unary_unary_rpc_method_handler(lambda request, context: b"\x08\x02")
            return None

    fake = grpc.server(futures.ThreadPoolExecutor(2), handlers=[NotServing()])
    fake_port = fake.add_insecure_port("127.0.0.1:0")
    fake.start()
    added = admin(f"add server performer/r5 127.0.0.1:{fake_port} proto h2 check weight 0")
    if "New server registered" not in added:
        fail(f"add server performer/r5: {added.strip()}")
    admin("enable health performer/r5")
    admin("enable server performer/r5")
    wait_for("r5 (NOT_SERVING) did not fail its check on the response",
             lambda: states().get("r5") == ("DOWN", "L7RSP"), timeout=20)
    fake.stop(0)
    say("a replica answering NOT_SERVING (r5, added through the admin socket) fails the check "
        "on its answer (L7RSP): OK")
    say("OK")
finally:
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
PY
