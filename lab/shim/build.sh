#!/usr/bin/env bash
# Builds the listen() shim (ccscope-listen.so) next to this script; skipped when up to date.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -f ccscope-listen.so ] || [ ccscope_listen.c -nt ccscope-listen.so ]; then
  cc -O2 -Wall -Wextra -Werror -shared -fPIC -o ccscope-listen.so.tmp ccscope_listen.c -ldl
  mv ccscope-listen.so.tmp ccscope-listen.so
fi
