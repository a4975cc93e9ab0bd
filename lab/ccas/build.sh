#!/usr/bin/env bash
# Builds ccscope's BPF congestion-control zoo: the loader (ccscope-cca, Rust, vendored
# libbpf 1.7) and one BPF object per CCA in lab/ccas/build/. Idempotent: cargo and the
# mtime checks below skip work that is up to date.
#
# Needs (Debian 12): clang bpftool libelf-dev zlib1g-dev, plus pkg-config make gcc and cargo.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/build"
export PATH="$HOME/.cargo/bin:$PATH"
log() { printf '[ccas] %s\n' "$*"; }

for tool in clang bpftool cargo; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool not found (apt-get install clang bpftool libelf-dev zlib1g-dev)" >&2; exit 1; }
done
[ -r /sys/kernel/btf/vmlinux ] || { echo "build.sh: kernel has no BTF (/sys/kernel/btf/vmlinux); struct_ops CCAs need CONFIG_DEBUG_INFO_BTF" >&2; exit 1; }

# 1. The loader first: its vendored libbpf also provides the BPF-side headers.
log "cargo build --release (ccscope-cca)"
cargo build --release --quiet --manifest-path "$here/loader/Cargo.toml"
inc=$(ls -d "$here"/loader/target/release/build/libbpf-sys-*/out/include 2>/dev/null | head -1)
[ -n "$inc" ] && [ -f "$inc/bpf/bpf_helpers.h" ] || { echo "build.sh: libbpf headers not found under loader/target" >&2; exit 1; }

mkdir -p "$out"

# 2. vmlinux.h from the running kernel's BTF (regenerated when the kernel changes).
kver="$(uname -r)"
if [ ! -s "$out/vmlinux.h" ] || [ "$(cat "$out/vmlinux.kver" 2>/dev/null)" != "$kver" ]; then
  log "generating vmlinux.h for $kver"
  bpftool btf dump file /sys/kernel/btf/vmlinux format c > "$out/vmlinux.h.tmp"
  mv "$out/vmlinux.h.tmp" "$out/vmlinux.h"
  echo "$kver" > "$out/vmlinux.kver"
  rm -f "$out"/*.bpf.o
fi

# Generated headers (response-function tables computed from the RFC formulas).
if [ ! -s "$out/highspeed_table.h" ] || [ "$here/bpf/gen_highspeed.py" -nt "$out/highspeed_table.h" ]; then
  python3 "$here/bpf/gen_highspeed.py" > "$out/highspeed_table.h.tmp" && mv "$out/highspeed_table.h.tmp" "$out/highspeed_table.h"
fi

# 3. One object per CCA, plus its parameter table (scraped from the PARAM() lines).
arch=$(uname -m | sed 's/x86_64/x86/; s/aarch64/arm64/')
built=0
for src in "$here"/bpf/*.bpf.c; do
  base=$(basename "$src" .bpf.c)
  obj="$out/$base.bpf.o"
  # Dependencies: the source, every local header it includes (cc_common.h, bbr_core.h),
  # vmlinux.h and the generated tables.
  deps=("$src" "$out/vmlinux.h" "$out/highspeed_table.h")
  for h in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$src"); do
    [ -f "$here/bpf/$h" ] && deps+=("$here/bpf/$h")
  done
  fresh=1
  for dep in "${deps[@]}"; do
    [ -f "$obj" ] && [ "$obj" -nt "$dep" ] || { fresh=0; break; }
  done
  [ "$fresh" = 1 ] && continue
  clang -target bpf -O2 -g -Wall -Werror -D__TARGET_ARCH_"$arch" \
        -I "$out" -I "$inc" -I "$here/bpf" -c "$src" -o "$obj.tmp"
  mv "$obj.tmp" "$obj"
  python3 - "$src" "$out/$base.params.json" <<'EOF'
import json, re, sys
src, dst = sys.argv[1], sys.argv[2]
pat = re.compile(r'^PARAM\(\s*([\w ]+?)\s*,\s*(\w+)\s*,\s*([^,]+?)\s*,\s*([^,]+?)\s*,\s*"(.*)"\s*\);', re.M)
rows = [{"name": n, "type": t, "default": d, "scale": int(s, 0), "doc": doc}
        for t, n, d, s, doc in pat.findall(open(src).read())]
json.dump(rows, open(dst, "w"), indent=1)
EOF
  built=$((built + 1))
done
# Objects whose source is gone must not stay loadable.
for obj in "$out"/*.bpf.o; do
  [ -e "$obj" ] || continue
  base=$(basename "$obj" .bpf.o)
  [ -f "$here/bpf/$base.bpf.c" ] || rm -f "$obj" "$out/$base.params.json"
done
log "$built object(s) rebuilt; zoo: $(cd "$out" && ls *.bpf.o | sed 's/\.bpf\.o$//' | tr '\n' ' ')"
