"""HAProxy (Debian's haproxy package, tools/install_deps.sh) running
deploy/haproxy/haproxy.cfg in front of replicas, for the tests and benches
that need the supported topology."""

import os
import shutil
import socket
import subprocess
import time

import grpc

import harness
from harness import pb_grpc

HAPROXY_CFG = os.path.join(harness.REPO, "deploy", "haproxy", "haproxy.cfg")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def haproxy_binary():
    for path in (shutil.which("haproxy"), "/usr/sbin/haproxy"):
        if path and os.access(path, os.X_OK):
            return path
    raise AssertionError("haproxy is missing: tools/install_deps.sh installs Debian's haproxy")


class Proxy:
    """HAProxy running deploy/haproxy/haproxy.cfg in front of the replicas."""

    def __init__(self, replicas):
        self.port = free_port()
        self.workdir = harness.make_temp_dir("haproxy")
        self.socket_path = os.path.join(self.workdir, "admin.sock")
        env = dict(os.environ, PERFORMER_PROXY_BIND="127.0.0.1:%d" % self.port,
                   PERFORMER_PROXY_SOCKET=self.socket_path)
        for i, address in enumerate(replicas, start=1):
            env["PERFORMER_R%d" % i] = address
        self.log_path = os.path.join(self.workdir, "haproxy.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([haproxy_binary(), "-db", "-f", HAPROXY_CFG], env=env,
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.port)
        self.stub = pb_grpc.GenerationStub(self.channel)

    def admin(self, command):
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(10)
                    s.connect(self.socket_path)
                    s.sendall((command + "\n").encode())
                    out = b""
                    while True:
                        chunk = s.recv(65536)
                        if not chunk:
                            return out.decode()
                        out += chunk
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def wait_up(self, servers, timeout=60):
        """Until every named server is UP in HAProxy (its health check passed)."""
        self.wait_state(servers, "UP", timeout)

    def wait_down(self, servers, timeout=60):
        """Until HAProxy has marked every named server DOWN. Servers start UP
        until their health checks fail `fall` times, so a test that lists
        closed ports waits for this before it counts on their not being
        picked."""
        self.wait_state(servers, "DOWN", timeout)

    def wait_state(self, servers, status, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            state = self.admin("show stat")
            reached = {line.split(",")[1] for line in state.splitlines()
                       if line.startswith("performer,") and ",%s," % status in line}
            if set(servers) <= reached:
                return
            if time.monotonic() > deadline:
                raise AssertionError("HAProxy servers %s not %s in %d s:\n%s\n%s"
                                     % (servers, status, timeout, state, self.log()))
            time.sleep(0.2)

    def log(self, skip=None):
        """The end of HAProxy's log (4,000 characters), without the lines
        that contain `skip` when it is given."""
        with open(self.log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        if skip is not None:
            text = "".join(line for line in text.splitlines(True) if skip not in line)
        return text[-4000:]

    def stop(self):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
