#!/usr/bin/python3
"""The layers of the source tree include only what lies below them.

Every include path is the repository root, so the compiler cannot refuse a header of a layer above
(core/CMakeLists.txt); this test does. It reads every #include "..." of kernels/, core/, server/
and examples/ and fails, listing each offending line, when a file includes a header its layer may
not:

  kernels/                       kernels/
  core attention library         itself, kernels/   (core/*.h, attention, feature_maps, recurrent,
                                                     registry, builders, transformers)
  core/io, core/runtime          themselves
  core/models                    the attention library, io (never kernels/: models are compositions
                                 of library parts, whose entry points dispatch to the kernels)
  core/decoding, core/generation models, the attention library, io
  core/training                  models, the attention library, io, runtime
  server/                        decoding, generation, runtime, and of models only the model folder
                                 loader and the decode step's options; kernels/ only for build
                                 facts (kernels_info.h) and the CUDA kernels' process-wide row
                                 invariance, set at start (cuda_row_invariance.h)
  examples/                      the core (any layer but kernels/), server/

Inside server/, each folder includes only itself and the folders before it in SERVER_ORDER
(process < tokenizer < engine < observer < logging < security < repository < metrics < service <
http); the
program's files directly in server/ may include any of them.

Run: python3 tests/core/layering_test.py (ctest unit.layering).
"""

import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIBRARY = ("attention", "feature_maps", "recurrent", "registry", "builders", "transformers")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer(path):
    """The layer of a repository path (a source file or an included header)."""
    parts = path.split("/")
    if parts[0] in ("kernels", "server", "examples", "proto", "performer"):
        return parts[0] if parts[0] != "performer" else "proto"
    if parts[0] != "core":
        return None
    if len(parts) == 2 or parts[1] in LIBRARY:
        return "library"
    return {"io": "io", "runtime": "io", "models": "models", "decoding": "decoding",
            "generation": "decoding", "training": "training"}.get(parts[1])


ALLOWED = {
    "kernels": {"kernels"},
    "library": {"library", "kernels"},
    "io": {"io"},
    "models": {"models", "library", "io"},
    "decoding": {"decoding", "models", "library", "io"},
    "training": {"training", "models", "library", "io"},
    "server": {"server", "decoding", "io", "proto"},
    "examples": {"examples", "library", "models", "decoding", "io", "server"},
}
# Single headers a layer may use beyond its layers.
EXCEPTIONS = {
    "server": {"core/models/model_class.h", "core/models/decode_step_options.h",
               "core/models/model_folder.h", "kernels/kernels_info.h",
               "kernels/cuda_row_invariance.h"},
}


# server/'s folders, lowest first.
SERVER_ORDER = ("process", "tokenizer", "engine", "observer", "logging", "security", "repository",
                "metrics", "service", "http")


def server_folder(path):
    """server/'s folder of a path, or None for a file directly in server/ or outside it."""
    parts = path.split("/")
    return parts[1] if parts[0] == "server" and len(parts) > 2 else None


def server_violation(path, header):
    """Why `path` may not include `header` inside server/, or None."""
    source, target = server_folder(path), server_folder(header)
    if source is None or target is None or source == target:
        return None
    if source not in SERVER_ORDER or target not in SERVER_ORDER:
        return "server/%s or server/%s is not in SERVER_ORDER" % (source, target)
    if SERVER_ORDER.index(target) < SERVER_ORDER.index(source):
        return None
    return "server/%s may not include server/%s" % (source, target)


def violations():
    out = []
    for top in ("kernels", "core", "server", "examples"):
        for root, _, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if not name.endswith((".h", ".cc", ".cu")):
                    continue
                path = os.path.relpath(os.path.join(root, name), REPO)
                source = layer(path)
                if source is None:
                    continue
                with open(os.path.join(REPO, path), encoding="utf-8") as f:
                    text = f.read()
                for match in INCLUDE.finditer(text):
                    header = match.group(1)
                    why = server_violation(path, header)
                    if why is not None:
                        out.append("%s includes %s: %s" % (path, header, why))
                    target = layer(header)
                    if target is None or target in ALLOWED[source]:
                        continue
                    if header in EXCEPTIONS.get(source, ()):
                        continue
                    out.append("%s (%s) includes %s (%s)" % (path, source, header, target))
    return out


def main():
    found = violations()
    for line in found:
        print(line)
    if found:
        print("%d include(s) cross the layers downward-only rule" % len(found), file=sys.stderr)
        return 1
    print("layering: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
