#!/usr/bin/env python3
"""Streams a completion from performer-serve: the smallest useful client.

    python3 examples/python/generate.py "Once upon a time"
    python3 examples/python/generate.py --target localhost:50051 --model my-lm \
        --max_new_tokens 64 --temperature 0.8 --top_p 0.95 --seed 7 "Hello"
    python3 examples/python/generate.py --list
    python3 examples/python/generate.py --session chat-1 --create_session "Hi."
    python3 examples/python/generate.py --session chat-1 "And then?"

Needs Debian's python3-grpcio and python3-protobuf and the generated stubs of
proto/performer/v1/generation.proto on PYTHONPATH. The build makes them in
build/python (PYTHONPATH=build/python), or generate them yourself:

    python3 -m grpc_tools.protoc ...            # pip's grpcio-tools, or Debian's:
    protoc -Iproto --python_out=OUT --grpc_python_out=OUT \
        --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin \
        proto/performer/v1/generation.proto

The text goes to stdout as it arrives; the finish reason, token counts and
timings go to stderr. A failed call prints the server's status and message
and exits 1.
"""

import argparse
import sys

import grpc

from performer.v1 import generation_pb2 as pb
from performer.v1 import generation_pb2_grpc as pb_grpc


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("prompt", nargs="?", default="", help="prompt text")
    p.add_argument("--target", default="localhost:50051", help="server address")
    p.add_argument("--model", default="", help="model name (default: the server's default)")
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, help="0 = greedy")
    p.add_argument("--top_p", type=float)
    p.add_argument("--top_k", type=int, default=0)
    p.add_argument("--seed", type=int)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--timeout", type=float, default=60, help="deadline in seconds")
    p.add_argument("--session", default="",
                   help="continue this session (sent also as x-session-id metadata, the key a "
                        "proxy routes on)")
    p.add_argument("--create_session", action="store_true",
                   help="start the --session with this prompt")
    p.add_argument("--list", action="store_true", help="list the hosted models and exit")
    return p.parse_args()


def list_models(stub, timeout):
    listing = stub.ListModels(pb.ListModelsRequest(), timeout=timeout)
    for m in listing.models:
        default = "  (default)" if m.name == listing.default_model else ""
        print("%s  %s  vocab=%d  max_len=%d  tokenizer=%s  state=%d B/seq%s"
              % (m.name, pb.ModelKind.Name(m.kind), m.vocab_size, m.max_sequence_length,
                 m.tokenizer or "-", m.state_bytes_per_sequence, default))


def generate(stub, args):
    request = pb.GenerateRequest(model=args.model, prompt_text=args.prompt,
                                 max_new_tokens=args.max_new_tokens, top_k=args.top_k,
                                 stop_strings=args.stop, session_id=args.session,
                                 create_session=args.create_session)
    # Optional fields: unset means the model's generation_config.json default.
    if args.temperature is not None:
        request.temperature = args.temperature
    if args.top_p is not None:
        request.top_p = args.top_p
    if args.seed is not None:
        request.seed = args.seed
    # A proxy in front of several replicas routes a session's turns to the
    # replica that holds it by this header.
    metadata = [("x-session-id", args.session)] if args.session else []
    last = None
    for message in stub.GenerateStream(request, timeout=args.timeout, metadata=metadata):
        sys.stdout.write(message.text)
        sys.stdout.flush()
        last = message
    sys.stdout.write("\n")
    if last is not None:
        sys.stderr.write("[%s: %d prompt + %d generated tokens, first token %.0f ms, total %.0f ms]\n"
                         % (pb.FinishReason.Name(last.finish_reason), last.usage.prompt_tokens,
                            last.usage.generated_tokens,
                            1000 * last.timings.time_to_first_token_seconds,
                            1000 * last.timings.total_seconds))
        if args.session:
            sys.stderr.write("[session %s at %d tokens, %d of the prompt from its state]\n"
                             % (args.session, last.session_position,
                                last.usage.cached_prompt_tokens))


def main():
    args = parse_args()
    with grpc.insecure_channel(args.target) as channel:
        stub = pb_grpc.GenerationStub(channel)
        try:
            if args.list:
                list_models(stub, args.timeout)
            else:
                generate(stub, args)
        except grpc.RpcError as e:
            sys.stderr.write("error: %s: %s\n" % (e.code().name, e.details()))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
