# performer-serve container image: the gRPC server (and performer-client, for
# debugging from inside a pod) on Debian 12, CPU only, with the default model
# repository (models/) at /models. Base images without a registry:
# deploy/docker/base-images.sh; build, run and query it:
# deploy/docker/check-image.sh (deploy/README.md, "Container image").
#
#   docker build --network host -t performer-serve:$(git rev-parse --short HEAD) .
#   docker run --rm --network host performer-serve:<tag>
#
# CPU only: Debian 12's LibTorch (libtorch1.13) has no CUDA, so --device=cuda
# exits with code 2 in this image. The CUDA image is
# deploy/docker/cuda.Dockerfile.

# --- the runtime base's packages ----------------------------------------------
# What the runtime base image already has: the build stage copies every other
# library the binaries load (deploy/docker/runtime-libraries.sh).
FROM debian:12-slim AS base-packages
RUN dpkg-query -W -f='${Package}\n' > /base-packages.txt

# --- build -------------------------------------------------------------------
FROM debian:12 AS build

# A lean list rather than tools/install_deps.sh: that script also installs
# what only the tests, benchmarks, lint and training tools need (GoogleTest,
# Google Benchmark, clang-format/-tidy, python3-torch, Prometheus, Node.js,
# fortunes...), several GiB that this stage never uses. ccache is left out:
# every image build starts from an empty cache.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libtorch-dev \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc \
      libabsl-dev prometheus-cpp-dev libspdlog-dev libsentencepiece-dev libssl-dev \
      nlohmann-json3-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
# Only what the configure step reads (.dockerignore keeps the rest out of the
# context); bench/ and examples/custom_attention/ are there because the
# top-level CMakeLists.txt always defines their targets, even though they are
# not built.
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY proto/ proto/
COPY kernels/ kernels/
COPY core/ core/
COPY server/ server/
COPY tools/ tools/
COPY bench/ bench/
COPY examples/custom_attention/ examples/custom_attention/

# Release, Ninja; no tests, no benchmarks; CUDA off (no nvcc here, and said
# explicitly so that a build machine with one cannot link libcudart into a
# binary whose image lacks it). performer-serve also builds its SentencePiece
# plugin (libperformer_sentencepiece.so, dlmopen'ed at run time). Not
# stripped: the symbol table is what names the frames of a crash's stack
# trace, for a few MiB.
RUN cmake -S . -B build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DPERFORMER_BUILD_TESTS=OFF \
      -DPERFORMER_BUILD_BENCH=OFF \
      -DPERFORMER_WITH_CUDA=OFF \
 && cmake --build build --target performer-serve performer-client

# The runtime's shared libraries: exactly the files `ldd` resolves for the
# three binaries, less the runtime base's (runtime-libraries.sh), instead of
# apt-get installing their packages, whose Depends bring about 0.6 GB that
# nothing loads (the image: 614 MB, against 1.24 GB with the packages).
# libopenblas0-openmp makes
# libblas.so.3, which LibTorch links, OpenBLAS: apt's own pick is the
# reference BLAS, about 25x slower.
COPY deploy/docker/runtime-libraries.sh /usr/local/bin/
COPY --from=base-packages /base-packages.txt /
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libopenblas0-openmp \
 && rm -rf /var/lib/apt/lists/* \
 && bash /usr/local/bin/runtime-libraries.sh /base-packages.txt /runtime \
      build/server/performer-serve build/server/libperformer_sentencepiece.so \
      build/tools/performer-client

# --- runtime -----------------------------------------------------------------
FROM debian:12-slim AS runtime
LABEL org.opencontainers.image.title="performer-serve" \
      org.opencontainers.image.description="gRPC server for Performer language models (CPU, LibTorch)"

# A fixed numeric UID/GID: Kubernetes' runAsNonRoot can only verify a
# numeric USER.
RUN groupadd --gid 10001 performer \
 && useradd --uid 10001 --gid performer --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin performer

# Least often changed first: the libraries (with their copyright files and
# /usr/share/doc/performer-serve/runtime-libraries.txt, which lists them by
# package and version), the model repository, then the binaries.
COPY --from=build /runtime/ /
COPY models/ /models/
# The plugin goes on the library search path: the server looks for it at its
# build-tree path first, then by name (server/tokenizer/sentencepiece_model.cc).
COPY --from=build /src/build/server/libperformer_sentencepiece.so /usr/local/lib/
COPY --from=build /src/build/server/performer-serve /src/build/tools/performer-client \
     /usr/local/bin/
RUN ldconfig

USER 10001:10001
EXPOSE 50051 9464
# The server is PID 1 and handles SIGTERM itself (sigwait): health turns
# NOT_SERVING, running streams drain for --drain_timeout, exit 0
# (deploy/docker/check-image.sh checks it).
STOPSIGNAL SIGTERM
# Flags given after the image (docker run ... IMAGE --flag, Kubernetes args)
# are appended and, for the same flag, the later one wins.
ENTRYPOINT ["/usr/local/bin/performer-serve", "--model_repository=/models", "--host=0.0.0.0", \
            "--log_format=json"]
CMD []
