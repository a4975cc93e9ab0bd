#!/usr/bin/env bash
# Builds the base image every ccscope image starts FROM, from Debian's own packages: no image
# registry is needed (debootstrap fetches bookworm from the Debian mirror apt already uses).
#
#   deploy/build-base.sh [TAG]        # default ccscope/base:bookworm; DEBIAN_MIRROR overrides
#
# Idempotent: an image that already has the tag is kept (FORCE=1 rebuilds it). The host's CA
# bundle goes into the image, so a TLS-inspecting proxy the build host trusts (for apt and
# PyPI inside `docker build`) is trusted there too.
set -euo pipefail
TAG=${1:-ccscope/base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DOCKER=${DOCKER:-docker}

log() { printf '\033[1m[build-base]\033[0m %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then echo "build-base: must run as root (debootstrap)" >&2; exit 1; fi
if [ "${FORCE:-0}" != 1 ] && $DOCKER image inspect "$TAG" >/dev/null 2>&1; then
  log "$TAG exists (FORCE=1 rebuilds it)"; exit 0
fi
command -v debootstrap >/dev/null || { log "apt: installing debootstrap"; apt-get install -y -qq debootstrap >/dev/null; }

root=$(mktemp -d /var/tmp/ccscope-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
log "debootstrap bookworm (minbase) from $MIRROR into $root"
debootstrap --variant=minbase --include=ca-certificates,python3,python3-venv,tini,procps \
  bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
# apt inside the images: the same mirror, security updates too; no recommends, no caches kept.
cat >"$root/etc/apt/sources.list" <<SRC
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb ${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} bookworm-security main
SRC
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$root/etc/apt/apt.conf.d/90ccscope"
# Services are started by the container's command, never by a package's maintainer script.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"; chmod +x "$root/usr/sbin/policy-rc.d"
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
log "importing as $TAG"
tar -C "$root" -c . | $DOCKER import \
  --change 'ENV LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENTRYPOINT ["/usr/bin/tini", "--"]' \
  --change 'CMD ["/bin/bash"]' - "$TAG" >/dev/null
log "done: $($DOCKER image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')"
