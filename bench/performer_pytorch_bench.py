#!/usr/bin/env python3
"""Times performer-pytorch, the reference implementation, on the bench model,
for the comparison with gpu_decode_bench in docs/gpu.md.

    python3 bench/performer_pytorch_bench.py ROOT [--quick]

ROOT holds the packages performer_pytorch, einops, local_attention and
axial_positional_embedding (tools/gpu_third_party.sh --performer-pytorch
copies them). The model is the bench model (bench/bench_model.h: vocab 256,
dim 512, depth 6, heads 8, dim_head 64, nb_features 256, causal), in eval
mode without gradients, on the GPU when there is one. Two measurements:

  * prompt forward: PerformerLM on [1, L] tokens, tokens/s;
  * generation as performer-pytorch does it (AutoregressiveWrapper.generate:
    the whole sequence forwarded again for every new token), 16-token
    prompts, batch B, tokens/s.

Its causal attention runs fast-transformers' CUDA causal product where that
extension is installed, otherwise its own chunked fallback; the output says
which. Each figure is the median of 5 timed runs after a warm-up. --quick
uses short sequences (a check of the script on a CPU). Prints markdown.
"""

import statistics
import sys
import time
import types


def import_performer_pytorch(root):
    sys.path.insert(0, root)
    # local_attention/__init__.py also imports its transformer, which needs
    # another package (hyper_connections); performer_pytorch uses only
    # LocalAttention, so the package is made here without running it.
    package = types.ModuleType("local_attention")
    package.__path__ = [f"{root}/local_attention"]
    sys.modules["local_attention"] = package
    from local_attention.local_attention import LocalAttention

    package.LocalAttention = LocalAttention
    # performer_pytorch compares torch versions with distutils' LooseVersion,
    # which Python 3.12 no longer has; numeric parts are enough for that.
    try:
        import distutils.version  # noqa: F401
    except ImportError:
        def parts(text):
            out = []
            for piece in text.split("+")[0].split("."):
                digits = "".join(c for c in piece if c.isdigit())
                out.append(int(digits) if digits else 0)
            return tuple(out)

        class LooseVersion:
            def __init__(self, text):
                self.key = parts(str(text))

            def __ge__(self, other):
                return self.key >= other.key

            def __lt__(self, other):
                return self.key < other.key

        distutils = types.ModuleType("distutils")
        version = types.ModuleType("distutils.version")
        version.LooseVersion = LooseVersion
        distutils.version = version
        sys.modules["distutils"] = distutils
        sys.modules["distutils.version"] = version
    import performer_pytorch

    return performer_pytorch


def median_seconds(run, synchronize):
    run()  # warm-up
    synchronize()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        run()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    args = [a for a in sys.argv[1:] if a != "--quick"]
    quick = "--quick" in sys.argv[1:]
    if len(args) != 1:
        sys.exit(__doc__)
    import torch

    performer_pytorch = import_performer_pytorch(args[0])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model = performer_pytorch.PerformerLM(
        num_tokens=256, max_seq_len=2048, dim=512, depth=6, heads=8, dim_head=64,
        nb_features=256, causal=True).to(device).eval()
    wrapper = performer_pytorch.AutoregressiveWrapper(model)
    attention = next(m for m in model.modules() if isinstance(m, performer_pytorch.FastAttention))
    causal = ("fast-transformers' CUDA causal product"
              if attention.causal_linear_fn.__name__ != "causal_linear_attention_noncuda"
              else "its chunked fallback (no fast-transformers extension)")
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"device: {name}; torch {torch.__version__}; causal attention: {causal}\n")

    print("| prompt forward L | performer-pytorch tokens/s |\n|---|---|")
    for length in ((64,) if quick else (512, 2048)):
        tokens = torch.randint(0, 256, (1, length), device=device)
        with torch.no_grad():
            seconds = median_seconds(lambda: model(tokens), synchronize)
        print(f"| {length} | {length / seconds:,.0f} |", flush=True)

    new_tokens = 4 if quick else 64
    print(f"\n| generate B (16-token prompts, {new_tokens} new tokens) "
          "| performer-pytorch tokens/s |\n|---|---|")
    for batch in ((1, 2) if quick else (1, 64)):
        prompts = torch.randint(0, 256, (batch, 16), device=device)
        with torch.no_grad():
            seconds = median_seconds(
                lambda: wrapper.generate(prompts, new_tokens, temperature=1.0), synchronize)
        print(f"| {batch} | {batch * new_tokens / seconds:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
