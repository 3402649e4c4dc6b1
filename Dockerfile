# performer-serve container image: the gRPC server (and performer-client, for
# debugging from inside a pod) on Debian 12, CPU only, with the default model
# repository (models/) at /models.
#
#   docker build -t performer-serve:$(git rev-parse --short HEAD) .
#   docker run --rm -p 50051:50051 -p 9464:9464 performer-serve:<tag>
#
# Kubernetes manifests: deploy/kubernetes (deploy/README.md). The runtime
# package list below is checked against `ldd` of the built binaries by
# tests/deploy/check_kubernetes.sh (ctest deploy.kubernetes).
#
# CPU only: Debian 12's LibTorch (libtorch1.13) has no CUDA, and a CUDA
# LibTorch is not a Debian package, so --device=cuda exits with code 2 in this
# image (docs/gpu.md).

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
# context); bench/ is there because the top-level CMakeLists.txt always
# defines the GPU benchmark targets, even though they are not built.
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY proto/ proto/
COPY kernels/ kernels/
COPY core/ core/
COPY server/ server/
COPY tools/ tools/
COPY bench/ bench/

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

# --- runtime -----------------------------------------------------------------
FROM debian:12-slim AS runtime
LABEL org.opencontainers.image.title="performer-serve" \
      org.opencontainers.image.description="gRPC server for Performer language models (CPU, LibTorch)"

# The shared libraries of the binaries, by Debian package: the packages that
# own the libraries performer-serve, performer-client and the SentencePiece
# plugin link directly (readelf -d NEEDED -> dpkg -S); apt brings the rest of
# their closure (LibTorch's many dependencies). libopenblas0-openmp is the
# BLAS that LibTorch reaches through the libblas.so.3 alternative: without it
# apt picks the reference BLAS, about 25x slower. libc6, libstdc++6 and
# libgcc-s1 come with debian:12-slim.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libtorch1.13 libopenblas0-openmp libgomp1 \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libssl3 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      libspdlog1.10 libfmt9 \
      libsentencepiece0 \
 && rm -rf /var/lib/apt/lists/*

# A fixed numeric UID/GID: Kubernetes' runAsNonRoot can only verify a
# numeric USER.
RUN groupadd --gid 10001 performer \
 && useradd --uid 10001 --gid performer --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin performer

# Least often changed first: the model repository, then the binaries.
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
# NOT_SERVING, running streams drain for --drain_timeout, exit 0. Checked as
# PID 1 of a PID namespace (unshare --pid), with streams running.
STOPSIGNAL SIGTERM
# Flags given after the image (docker run ... IMAGE --flag, Kubernetes args)
# are appended and, for the same flag, the later one wins.
ENTRYPOINT ["/usr/local/bin/performer-serve", "--model_repository=/models", "--host=0.0.0.0", \
            "--log_format=json"]
CMD []
