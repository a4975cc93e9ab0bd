# A measuring worker: ccscope-link (namespaces, TUN, nftables) and the download clients. Run it
# with NET_ADMIN, SYS_ADMIN (namespaces, the private /etc/hosts mount), SYS_NICE (the emulator's
# SCHED_FIFO loop), /dev/net/tun, writable /proc/sys (sysctls inside its shells), and the host's
# /run/ccscope shared (shell index locks, the lab's hosts file and CA); see docker-compose.yml.
#
# ccscope-link is the one built by deploy/install.sh on the build host: it needs Rust >= 1.85
# (edition 2024) and Debian 12's rustc is 1.63, so the image takes the host's build (same
# Debian 12 glibc) rather than a toolchain from outside Debian; so does ccscope-tcp-get.
FROM ccscope/python
RUN apt-get update && apt-get install -y iproute2 nftables && rm -rf /var/lib/apt/lists/*
COPY capture/link/target/release/ccscope-link /usr/local/bin/ccscope-link
# The compiled download client (CCSCOPE_TCP_CLIENT=compiled), built on the host against
# Debian 12's OpenSSL (libssl3, in the base).
COPY capture/tcpget/target/release/ccscope-tcp-get /usr/local/bin/ccscope-tcp-get
COPY deploy/docker/worker-start.sh /usr/local/bin/worker-start
ENV CCSCOPE_LINK=/usr/local/bin/ccscope-link CCSCOPE_TCP_GET=/usr/local/bin/ccscope-tcp-get
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/worker-start"]
CMD ["ccscope", "worker", "--help"]
