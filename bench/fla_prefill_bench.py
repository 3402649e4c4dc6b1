#!/usr/bin/env python3
"""Times flash-linear-attention's chunk_linear_attn on the shapes of
bench/gpu_kernel_bench's prefill table, for the comparison in docs/gpu.md.

    python3 bench/fla_prefill_bench.py FLA_ROOT

FLA_ROOT holds the fla/ package (tools/gpu_third_party.sh --fla copies the
parts this needs). Shapes: q, k [1, L, 8, 256], v [1, L, 8, 64], bf16, for
L = 1k, 4k, 16k, 64k; normalised outputs and the final state, as our prefill
gives (its v carries the ones column of the normaliser instead). Each time is
the median of triton.testing.do_bench after its warm-up. Needs a CUDA device,
PyTorch and Triton; prints a markdown table.
"""

import re
import sys
import types


def import_chunk_linear_attn(root):
    # fla/__init__.py and fla/ops/__init__.py import every model and op (and
    # transformers); packages made here skip them, so that only
    # fla.ops.linear_attn and what it imports are loaded.
    for name, path in (("fla", f"{root}/fla"), ("fla.ops", f"{root}/fla/ops")):
        package = types.ModuleType(name)
        package.__path__ = [path]
        sys.modules[name] = package
    # fla.utils reads the package's version.
    with open(f"{root}/fla/__init__.py") as init:
        sys.modules["fla"].__version__ = re.search(r'__version__ = "([^"]+)"', init.read()).group(1)
    from fla.ops.linear_attn import chunk_linear_attn

    return chunk_linear_attn


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    import torch
    import triton.testing

    if not torch.cuda.is_available():
        sys.exit("fla_prefill_bench: no CUDA device")
    chunk_linear_attn = import_chunk_linear_attn(sys.argv[1])
    heads, features, dim_head = 8, 256, 64
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}, "
          f"triton {triton.__version__}\n")
    print("| prefill L | FLA chunk_linear_attn (ms) |\n|---|---|")
    torch.manual_seed(0)
    for length in (1024, 4096, 16384, 65536):
        options = dict(device="cuda", dtype=torch.bfloat16)
        q = torch.rand(1, length, heads, features, **options)
        k = torch.rand(1, length, heads, features, **options)
        v = torch.randn(1, length, heads, dim_head, **options)
        with torch.no_grad():
            ms = triton.testing.do_bench(
                lambda: chunk_linear_attn(q, k, v, normalize=True, output_final_state=True),
                return_mode="median")
        print(f"| {length} | {ms:.3f} |", flush=True)


if __name__ == "__main__":
    main()
