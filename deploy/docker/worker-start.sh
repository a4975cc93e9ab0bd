#!/bin/sh
# The worker's shells set sysctls in their own network namespaces (SACK, the MSS floor), which
# needs a writable /proc/sys; the engine mounts it read-only. Docker's
# `--security-opt systempaths=unconfined` would lift that, but it is an option of the docker CLI
# that docker-compose 1.29 (Debian 12's) cannot pass, and `privileged` asks for capabilities a
# host may not hold. With CAP_SYS_ADMIN the container remounts its own /proc/sys instead.
set -eu
mount -o remount,rw /proc/sys
exec "$@"
