/*
 * LD_PRELOAD shim for servers that cannot choose a congestion control per
 * listening socket themselves (nginx has no directive for it). On listen()
 * it looks the socket's local IPv4 address up in $CCSCOPE_CCA_MAP
 * ("198.18.0.11=reno,198.18.0.14=cc_bic") and sets TCP_CONGESTION; with
 * $CCSCOPE_MAXSEG it also sets TCP_MAXSEG (the MSS the server sends and
 * advertises). Accepted sockets inherit both from the listener. A CCA that
 * cannot be set makes listen() fail, so the server refuses to start instead
 * of silently serving the default CCA.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int (*real_listen)(int, int);

/* The CCA mapped to addr in map, copied into out; 0 if none. */
static int lookup(const char *map, const char *addr, char *out, size_t outlen) {
    size_t alen = strlen(addr);
    const char *p = map;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq && (size_t)(eq - p) == alen && strncmp(p, addr, alen) == 0) {
            size_t n = len - alen - 1;
            if (n == 0 || n >= outlen)
                return 0;
            memcpy(out, eq + 1, n);
            out[n] = 0;
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

static int apply(int fd) {
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int type = 0;
    socklen_t tlen = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM)
        return 0;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0 || sa.sin_family != AF_INET)
        return 0;
    char addr[INET_ADDRSTRLEN];
    if (!inet_ntop(AF_INET, &sa.sin_addr, addr, sizeof addr))
        return 0;
    const char *map = getenv("CCSCOPE_CCA_MAP");
    char cca[64];
    if (map && lookup(map, addr, cca, sizeof cca)) {
        if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cca, strlen(cca)) != 0) {
            int e = errno;
            fprintf(stderr, "ccscope-listen: TCP_CONGESTION %s on %s: %s\n", cca, addr, strerror(e));
            errno = e;
            return -1;
        }
    }
    const char *mss = getenv("CCSCOPE_MAXSEG");
    if (mss && *mss) {
        int v = atoi(mss);
        if (v > 0 && setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &v, sizeof v) != 0) {
            int e = errno;
            fprintf(stderr, "ccscope-listen: TCP_MAXSEG %d on %s: %s\n", v, addr, strerror(e));
            errno = e;
            return -1;
        }
    }
    return 0;
}

int listen(int fd, int backlog) {
    if (!real_listen)
        real_listen = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
    if (!real_listen) {
        errno = ENOSYS;
        return -1;
    }
    if (apply(fd) != 0)
        return -1;
    return real_listen(fd, backlog);
}
