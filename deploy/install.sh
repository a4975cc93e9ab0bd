#!/usr/bin/env bash
# Installs everything ccscope needs on Debian 12 as root: system packages, the Rust link
# emulator, and a Python venv with the package. Idempotent: every step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: must run as root (network namespaces, TUN and nftables need it)" >&2
  exit 1
fi

# --- system packages -------------------------------------------------------------------
APT_PKGS=(iproute2 nftables iputils-ping procps openssl curl ca-certificates
          build-essential pkg-config python3 python3-venv tshark
          clang bpftool libelf-dev zlib1g-dev postgresql redis-server
          nginx-light ethtool
          chromium chromium-driver)  # chromium: the dashboard's browser tests (headless, Selenium)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt: installing ${missing[*]}"
  apt-get update -qq
  # tshark asks whether non-root users may capture; the answer does not matter here.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  # nginx is a lab server started in a lab namespace on demand, never the machine's own
  # service: keep its package from starting one on port 80.
  rcd=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; rcd=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  [ "$rcd" = 1 ] && rm -f /usr/sbin/policy-rc.d
fi
if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled nginx >/dev/null 2>&1; then
  systemctl disable --now nginx >/dev/null 2>&1 || true
fi
[ -e /dev/net/tun ] || { mkdir -p /dev/net; mknod /dev/net/tun c 10 200; chmod 600 /dev/net/tun; }

# --- Rust toolchain and the link emulator ------------------------------------------------
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
  log "apt: installing Debian's cargo/rustc (no rustup found)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cargo rustc >/dev/null
fi
log "building capture/link (ccscope-link)"
cargo build --release --quiet --manifest-path capture/link/Cargo.toml

log "building lab/ccas (BPF congestion-control zoo and its loader)"
lab/ccas/build.sh
log "building lab/shim (per-listener CCA for nginx)"
lab/shim/build.sh

# --- Python ------------------------------------------------------------------------------
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.ccscope-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "pip: installing ccscope and its dependencies into .venv"
  .venv/bin/pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet -e '.[dev]'
  echo "$want" > "$stamp"
fi
log "ready: $(.venv/bin/ccscope --version), $(capture/link/target/release/ccscope-link --version 2>/dev/null || echo ccscope-link)"
