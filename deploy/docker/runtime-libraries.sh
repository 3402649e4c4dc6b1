#!/usr/bin/env bash
# Copies into ROOT the shared libraries that BINARY... load and that the
# runtime base image lacks, so that the image's runtime stage carries those
# files and nothing else (no package manager run, no package that only a
# library's Depends brings: about 0.6 GB for Debian's LibTorch).
#
#   runtime-libraries.sh [--dry-run] BASE_PACKAGES ROOT BINARY...
#
# BASE_PACKAGES: a file listing the packages of the runtime base image, one a
# line (the build stage records `dpkg-query -W -f='${Package}\n'` before it
# installs anything; its base is the same release as the runtime base).
# What `ldd` resolves for each binary is then, per library:
#   - owned by a package of BASE_PACKAGES, or the dynamic loader: left out;
#   - anything else (a Debian package's library, or one outside any package,
#     e.g. an unpacked LibTorch): copied, symlinks resolved, to
#     ROOT/usr/lib/<multiarch>/<soname>, with its package's copyright file
#     and a line in ROOT/usr/share/doc/performer-serve/runtime-libraries.txt.
# A library ldd cannot find fails the build, except the NVIDIA driver's
# (libcuda.so.1, libnvidia-ml.so.1), which the NVIDIA container runtime
# mounts into a GPU container. libblas.so.3 must be OpenBLAS (the
# alternative Debian picks when libopenblas0-openmp is installed); the
# reference BLAS is about 25x slower for LibTorch.
# --dry-run: only lists what would be copied (check_kubernetes.sh runs it on
# the built binaries of this machine).
set -euo pipefail

dry_run=0
if [[ ${1:-} == --dry-run ]]; then
  dry_run=1
  shift
fi
(( $# >= 3 )) || { echo "usage: $0 [--dry-run] BASE_PACKAGES ROOT BINARY..." >&2; exit 2; }
base_packages=$1 root=$2
shift 2

die() { echo "runtime-libraries.sh: $*" >&2; exit 1; }
[[ -r $base_packages ]] || die "cannot read $base_packages"
multiarch=$(gcc -print-multiarch 2>/dev/null || dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null ||
            echo "$(uname -m)-linux-gnu")
declare -A base
while read -r package; do [[ -n $package ]] && base[$package]=1; done < "$base_packages"

# Every library the binaries load: soname -> resolved path.
declare -A path_of
sonames=()
for binary in "$@"; do
  [[ -e $binary ]] || die "no such binary: $binary"
  while read -r line; do
    [[ $line == *"=>"* ]] || continue  # the vDSO and the loader's own line
    soname=${line%% =>*}
    path=${line#*=> }
    path=${path%% (*}
    if [[ $path == "not found" ]]; then
      case $soname in
        libcuda.so.1|libnvidia-ml.so.1) continue ;;  # the host driver's, mounted at run time
      esac
      die "$(basename "$binary"): $soname not found"
    fi
    [[ -n ${path_of[$soname]:-} ]] && continue
    path_of[$soname]=$path
    sonames+=("$soname")
  done < <(ldd "$binary")
done

# Their packages, in one dpkg-query: each path, its target, and their
# /usr-merged twins (dpkg knows a file under one of the two names).
candidates() {
  local p
  for p in "$1" "$(readlink -f "$1")"; do
    echo "$p"
    if [[ $p == /usr/* ]]; then echo "${p#/usr}"; else echo "/usr$p"; fi
  done
}
declare -A package_of_path
mapfile -t every < <(for soname in "${sonames[@]}"; do candidates "${path_of[$soname]}"; done | sort -u)
while IFS= read -r line; do
  [[ $line == diversion* ]] && continue
  package=${line%%: *} file=${line#*: }
  package=${package%%,*}
  package_of_path[$file]=${package%%:*}
done < <(dpkg-query -S "${every[@]}" 2>/dev/null || true)
declare -A version_of
while read -r package version; do
  version_of[$package]=$version
done < <(dpkg-query -W -f='${Package} ${Version}\n' 2>/dev/null || true)

lines=()
for soname in "${sonames[@]}"; do
  path=${path_of[$soname]}
  package=""
  while read -r candidate; do
    package=${package_of_path[$candidate]:-}
    [[ -n $package ]] && break
  done < <(candidates "$path")
  [[ -n $package && -n ${base[$package]:-} ]] && continue
  if [[ $soname == libblas.so.3 && $(readlink -f "$path") != *openblas* ]]; then
    die "libblas.so.3 is $(readlink -f "$path"), not OpenBLAS: install libopenblas0-openmp"
  fi
  version=-
  [[ -n $package ]] && version=${version_of[$package]:--}
  lines+=("$soname ${package:--} $version $(stat -L -c %s "$path")")
  (( dry_run )) && continue
  install -D -m 0644 "$(readlink -f "$path")" "$root/usr/lib/$multiarch/$soname"
  if [[ -n $package && -r /usr/share/doc/$package/copyright ]]; then
    install -D -m 0644 "/usr/share/doc/$package/copyright" "$root/usr/share/doc/$package/copyright"
  fi
done

total=0
for line in "${lines[@]}"; do total=$(( total + ${line##* } )); done
if (( dry_run )); then
  printf '%s\n' "${lines[@]}"
else
  mkdir -p "$root/usr/share/doc/performer-serve"
  { echo "# soname package version bytes"; printf '%s\n' "${lines[@]}"; } \
    > "$root/usr/share/doc/performer-serve/runtime-libraries.txt"
fi
echo "runtime-libraries.sh: ${#lines[@]} libraries, $(( total >> 20 )) MiB, beyond the base image's" >&2
