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
APT_PKGS=(iproute2 nftables iputils-ping procps openssl curl ca-certificates acl
          build-essential pkg-config python3 python3-venv tshark
          clang bpftool libelf-dev zlib1g-dev postgresql redis-server
          nginx-light ethtool libssl-dev
          chromium chromium-driver
          cmake)  # chromium: the dashboard's browser tests; cmake: quiche's BoringSSL
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

# The unprivileged user a shell's command (the download client) and the API run as: no login,
# no home, no capabilities. ccscope-link falls back to `nobody` where it is missing.
if ! getent passwd ccscope >/dev/null; then
  log "creating the ccscope system user"
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin ccscope
fi
# That user runs .venv/bin/python -m ccscope.capture.fetch from this checkout: let it traverse
# the directories above the checkout and above the interpreter (either may be under /root)
# and nothing more.
reach() {
  local d
  d=$(dirname "$(readlink -f "$1")")
  while [ "$d" != / ]; do
    runuser -u ccscope -- test -x "$d" 2>/dev/null || { log "letting ccscope traverse $d"; setfacl -m u:ccscope:x "$d"; }
    d=$(dirname "$d")
  done
}
reach "$(pwd -P)/pyproject.toml"

# --- Rust toolchain and the link emulator ------------------------------------------------
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
  log "apt: installing Debian's cargo/rustc (no rustup found)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cargo rustc >/dev/null
fi
log "building capture/link (ccscope-link)"
cargo build --release --quiet --manifest-path capture/link/Cargo.toml

# The compiled download client (capture/tcpget, opt-in): the system's OpenSSL, built in seconds.
log "building capture/tcpget (ccscope-tcp-get, the HTTP(S) download client)"
cargo build --release --quiet --manifest-path capture/tcpget/Cargo.toml

log "building lab/ccas (BPF congestion-control zoo and its loader)"
lab/ccas/build.sh
log "building lab/shim (per-listener CCA for nginx)"
lab/shim/build.sh

# The QUIC client (capture/quic) and the lab's quiche server (lab/quic/quiche-server) share one
# target directory, so quiche and the BoringSSL it vendors (built with cmake) compile once: the
# first build takes ~6 CPU-minutes (~20 min wall on a busy 2-core VM), later ones nothing. The
# stamp skips even cargo's own check when no source changed.
QUIC_TARGET=capture/quic/target
quic_want=$(cat capture/quic/Cargo.toml capture/quic/Cargo.lock capture/quic/src/*.rs \
  lab/quic/quiche-server/Cargo.toml lab/quic/quiche-server/Cargo.lock lab/quic/quiche-server/src/*.rs \
  | sha256sum | cut -d' ' -f1)
if [ -x "$QUIC_TARGET/release/ccscope-quic-get" ] && [ -x "$QUIC_TARGET/release/ccscope-quiche-server" ] \
   && [ "$(cat "$QUIC_TARGET/.ccscope-stamp" 2>/dev/null)" = "$quic_want" ]; then
  log "capture/quic and lab/quic/quiche-server are up to date"
else
  log "building capture/quic (HTTP/3 client) and lab/quic/quiche-server (quiche + BoringSSL)"
  cargo build --release --quiet --manifest-path capture/quic/Cargo.toml
  cargo build --release --quiet --manifest-path lab/quic/quiche-server/Cargo.toml --target-dir "$QUIC_TARGET"
  echo "$quic_want" > "$QUIC_TARGET/.ccscope-stamp"
fi

# The lab's third QUIC stack: quic-go, from the Go module proxy (go.sum pins it). Optional: the
# lab runs the stacks it has, so a machine without Go still gets quiche and aioquic.
QUICGO=lab/quic/quicgo-server
export PATH="$PATH:/usr/local/go/bin"
if command -v go >/dev/null 2>&1; then
  go_want=$(cat "$QUICGO/go.mod" "$QUICGO/go.sum" "$QUICGO"/*.go | sha256sum | cut -d' ' -f1)
  if [ -x "$QUICGO/ccscope-quicgo-server" ] && [ "$(cat "$QUICGO/.ccscope-stamp" 2>/dev/null)" = "$go_want" ]; then
    log "lab/quic/quicgo-server is up to date"
  else
    log "building lab/quic/quicgo-server (quic-go)"
    (cd "$QUICGO" && go build -o ccscope-quicgo-server .)
    echo "$go_want" > "$QUICGO/.ccscope-stamp"
  fi
else
  log "no Go toolchain: the lab's quic-go server is skipped"
fi

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
reach .venv/bin/python
runuser -u ccscope -- .venv/bin/python -c 'import ccscope.capture.fetch' \
  || { echo "setup: the ccscope user cannot run .venv/bin/python -m ccscope.capture.fetch" >&2; exit 1; }
log "ready: $(.venv/bin/ccscope --version), $(capture/link/target/release/ccscope-link --version 2>/dev/null || echo ccscope-link)"
