#!/usr/bin/env bash
# Makes the base images the Dockerfile starts from, debian:12 and
# debian:12-slim, without an image registry: debootstrap a minimal Debian 12
# (bookworm) root from the Debian mirror this machine's apt already uses, and
# `docker import` it under both tags.
#
#   sudo deploy/docker/base-images.sh            # the tags not present yet
#   sudo deploy/docker/base-images.sh --force    # remake both
#
# Needs root, debootstrap and a running Docker daemon. The mirror is the first
# `deb` source of /etc/apt/sources.list or /etc/apt/sources.list.d/ (one-line
# or deb822 format) that carries the suite bookworm; MIRROR=URL overrides it.
# The images' apt sources are that mirror (bookworm, bookworm-updates) and the
# one the host uses for bookworm-security, if any (SECURITY_MIRROR=URL).
# debian:12 is the minbase root; debian:12-slim is the same root without
# documentation (copyright files kept), manual pages and translations, and
# with a dpkg configuration that keeps later packages from adding them, as
# the slim variant of Docker Hub's image is made.
set -euo pipefail

force=0
[[ ${1:-} == --force ]] && force=1
suite=bookworm

die() { echo "base-images.sh: $*" >&2; exit 1; }
(( EUID == 0 )) || die "run as root (debootstrap needs it)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
docker info >/dev/null 2>&1 || die "no Docker daemon answers (docker info)"

# Only the missing tags (a new debian:12 would invalidate every build cache).
tags=()
for tag in debian:12 debian:12-slim; do
  if (( force )) || ! docker image inspect "$tag" >/dev/null 2>&1; then tags+=("$tag"); fi
done
if (( ${#tags[@]} == 0 )); then
  echo "debian:12 and debian:12-slim exist (--force remakes them)"
  exit 0
fi

# The URI of the first deb source that serves suite $1.
apt_mirror() {
  local f suite=$1
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r $f ]] || continue
    # deb [options] URI SUITE COMPONENTS...
    awk -v s="$suite" '$1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == s) { print $i; exit } }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] || continue
    # deb822: paragraphs of "Field: value"; a blank line ends one.
    awk -v s="$suite" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " s " ") && uris != "") {
          split(uris, u, " "); print u[1]; found = 1; exit }
        types = suites = uris = "" }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^Types:/  { sub(/^Types:[ \t]*/, "");  types = $0 }
      /^URIs:/   { sub(/^URIs:[ \t]*/, "");   uris = $0 }
      /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
      END { if (!found) flush() }' "$f"
  done
}

mirror=${MIRROR:-$(apt_mirror "$suite" | head -n 1)}
security=${SECURITY_MIRROR:-$(apt_mirror "$suite-security" | head -n 1)}
[[ -n $mirror ]] || die "no deb source for $suite in the apt sources; set MIRROR=URL"
echo "debootstrap --variant=minbase $suite from $mirror"

root=$(mktemp -d /var/tmp/debian12-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
chmod 0755 "$root"  # the image's /: mktemp made it 0700, which only root could traverse
debootstrap --variant=minbase "$suite" "$root" "$mirror"

# The same mirrors as the host, so that apt-get in a build stage reaches them;
# no package lists or caches.
rm -f "$root/etc/apt/sources.list"
{
  printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\n' "$mirror" "$suite" "$suite"
  printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  if [[ -n $security ]]; then
    printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\n' "$security" "$suite"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  fi
} > "$root/etc/apt/sources.list.d/debian.sources"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
# apt downloads as _apt into this folder.
chroot "$root" chown _apt:root /var/cache/apt/archives/partial

import_as() {
  tar --numeric-owner -C "$root" -c . \
    | docker import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$1"
}
[[ " ${tags[*]} " == *" debian:12 "* ]] && import_as debian:12

if [[ " ${tags[*]} " == *" debian:12-slim "* ]]; then
  cat > "$root/etc/dpkg/dpkg.cfg.d/slim" <<'SLIM'
# No documentation, manual pages or translations (the copyright files stay).
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
SLIM
  find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/groff/* \
    "$root"/usr/share/lintian/*
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  import_as debian:12-slim
fi
docker image ls debian
