# performer-serve CUDA image: the server and performer-client built against a
# CUDA LibTorch, serving with --device=cuda on an NVIDIA GPU
# (deploy/kubernetes/overlays/gpu). The same recipe as the CPU image (the
# top-level Dockerfile) on a CUDA base; deploy/README.md, "CUDA image".
#
# Needs, besides a Docker engine with network access for apt and LibTorch:
#   - the CUDA base images CUDA_BUILD_IMAGE (nvcc, cuDNN; Ubuntu 24.04, whose
#     packages the build stage installs) and CUDA_RUNTIME_IMAGE (the same
#     CUDA and cuDNN, runtime libraries only);
#   - LibTorch for that CUDA version: PyTorch's C++ distribution, "cxx11 ABI,
#     shared with deps" zip, by URL and SHA-256 (LIBTORCH_URL,
#     LIBTORCH_SHA256); its top folder is libtorch/;
#   - at run time, the NVIDIA driver and Container Toolkit on the host
#     (docker run --gpus all; Kubernetes: the NVIDIA device plugin).
#
#   docker build --network host -f deploy/docker/cuda.Dockerfile \
#     --build-arg LIBTORCH_URL=<zip URL> --build-arg LIBTORCH_SHA256=<sha256> \
#     -t performer-serve-cuda:$(git rev-parse --short HEAD) .
#   docker run --rm --gpus all --network host performer-serve-cuda:<tag>
ARG CUDA_BUILD_IMAGE=nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04

# --- LibTorch: downloaded, checked, unpacked (needs no CUDA base) -------------------
FROM debian:12 AS libtorch
ARG LIBTORCH_URL
ARG LIBTORCH_SHA256
RUN test -n "$LIBTORCH_URL" && test -n "$LIBTORCH_SHA256" \
      || { echo "--build-arg LIBTORCH_URL=<zip> and LIBTORCH_SHA256=<sha256> are required" >&2; exit 1; } \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates curl unzip \
 && rm -rf /var/lib/apt/lists/* \
 && curl -fsSL -o /libtorch.zip "$LIBTORCH_URL" \
 && echo "$LIBTORCH_SHA256  /libtorch.zip" | sha256sum -c - \
 && unzip -q /libtorch.zip -d /opt \
 && rm /libtorch.zip \
 && test -f /opt/libtorch/share/cmake/Torch/TorchConfig.cmake

# --- the runtime base's packages ----------------------------------------------------
FROM ${CUDA_RUNTIME_IMAGE} AS base-packages
RUN dpkg-query -W -f='${Package}\n' > /base-packages.txt

# --- build -----------------------------------------------------------------------------
FROM ${CUDA_BUILD_IMAGE} AS build
# The same lean list as the CPU image's build stage, less Debian's LibTorch.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc \
      libabsl-dev prometheus-cpp-dev libspdlog-dev libsentencepiece-dev libssl-dev \
      nlohmann-json3-dev \
 && rm -rf /var/lib/apt/lists/*
COPY --from=libtorch /opt/libtorch /opt/libtorch

WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY proto/ proto/
COPY kernels/ kernels/
COPY core/ core/
COPY server/ server/
COPY tools/ tools/
COPY bench/ bench/
COPY examples/custom_attention/ examples/custom_attention/

# kernels/cuda compiled for CUDA_ARCHITECTURES (80 A100, 89 L4/L40S, 90
# H100/H200: one image for the common data-centre GPUs).
ARG CUDA_ARCHITECTURES="80;89;90"
RUN cmake -S . -B build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH=/opt/libtorch \
      -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHITECTURES" \
      -DPERFORMER_BUILD_TESTS=OFF \
      -DPERFORMER_BUILD_BENCH=OFF \
      -DPERFORMER_WITH_CUDA=ON \
 && cmake --build build --target performer-serve performer-client

# The libraries ldd resolves, less the CUDA runtime base's (its CUDA and
# cuDNN libraries among them); LibTorch's own, from /opt/libtorch/lib, are
# copied. The driver's (libcuda.so.1) comes from the host at run time.
COPY deploy/docker/runtime-libraries.sh /usr/local/bin/
COPY --from=base-packages /base-packages.txt /
RUN bash /usr/local/bin/runtime-libraries.sh /base-packages.txt /runtime \
      build/server/performer-serve build/server/libperformer_sentencepiece.so \
      build/tools/performer-client

# --- runtime ---------------------------------------------------------------------
FROM ${CUDA_RUNTIME_IMAGE} AS runtime
LABEL org.opencontainers.image.title="performer-serve-cuda" \
      org.opencontainers.image.description="gRPC server for Performer language models (CUDA, LibTorch)"

RUN groupadd --gid 10001 performer \
 && useradd --uid 10001 --gid performer --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin performer

COPY --from=build /runtime/ /
COPY models/ /models/
COPY --from=build /src/build/server/libperformer_sentencepiece.so /usr/local/lib/
COPY --from=build /src/build/server/performer-serve /src/build/tools/performer-client \
     /usr/local/bin/
RUN ldconfig

USER 10001:10001
EXPOSE 50051 9464
STOPSIGNAL SIGTERM
# --device=cuda: the first visible GPU (the one the device plugin assigns);
# the server refuses to start, with exit code 2, when none is visible.
ENTRYPOINT ["/usr/local/bin/performer-serve", "--model_repository=/models", "--host=0.0.0.0", \
            "--log_format=json", "--device=cuda"]
CMD []
