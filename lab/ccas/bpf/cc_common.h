/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared helpers for ccscope's BPF congestion-control zoo.
 *
 * Every algorithm here is written from its paper or RFC and the documented Linux
 * default constants. Conventions:
 *   - PARAM() declares a load-time tunable: a `const volatile` global in .rodata that
 *     the loader (ccscope-cca --param key=value) overwrites before the object is loaded.
 *     `scale` is the fixed-point denominator (1 for plain integers) so the loader can
 *     accept `beta=0.5` for a /1024 parameter. build.sh scrapes PARAM lines into
 *     <name>.params.json for docs and validation.
 *   - Time comes from tp->tcp_mstamp (microseconds, refreshed on every ACK) so no
 *     algorithm depends on the kernel's HZ.
 *   - Per-connection state lives in icsk_ca_priv (104 bytes); larger state uses a
 *     socket-local-storage map.
 */
#ifndef CC_COMMON_H
#define CC_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define PARAM(type, name, dflt, scale, doc) const volatile type name = (dflt)

/* One struct_ops program per callback; BPF_PROG unpacks the u64 context array. */
#define CC_PROG(ret, fn, args...) SEC("struct_ops") ret BPF_PROG(fn, args)

/* Constants the kernel defines with #define (so vmlinux.h cannot carry them). */
#define TCP_INFINITE_SSTHRESH 0x7fffffff
#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_OK 1
#define TCP_ECN_QUEUE_CWR 2
#define TCP_ECN_DEMAND_CWR 4
#define TCP_ECN_SEEN 8
#define ICSK_ACK_TIMER 2
#define ICSK_ACK_NOW 8
#define USEC_PER_SEC 1000000ULL
#define USEC_PER_MSEC 1000ULL
#define CA_PRIV_BYTES (13 * 8)

#define min_t(t, a, b) ((t)(a) < (t)(b) ? (t)(a) : (t)(b))
#define max_t(t, a, b) ((t)(a) > (t)(b) ? (t)(a) : (t)(b))
#define clamp_t(t, v, lo, hi) min_t(t, max_t(t, v, lo), hi)

/* Compile-time guard that a private state struct fits in icsk_ca_priv. */
#define CA_PRIV_CHECK(type) _Static_assert(sizeof(type) <= CA_PRIV_BYTES, #type " too big for icsk_ca_priv")

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline void *ca_priv(const struct sock *sk)
{
	return (void *)inet_csk(sk)->icsk_ca_priv;
}

static __always_inline __u32 cwnd_of(const struct tcp_sock *tp) { return tp->snd_cwnd; }

/* cwnd never leaves [2, snd_cwnd_clamp]: RFC 5681's floor and the socket's ceiling. */
static __always_inline void set_cwnd(struct tcp_sock *tp, __u32 w)
{
	if (w < 2)
		w = 2;
	if (w > tp->snd_cwnd_clamp)
		w = tp->snd_cwnd_clamp;
	tp->snd_cwnd = w;
}

static __always_inline __u64 now_us(const struct tcp_sock *tp) { return tp->tcp_mstamp; }

static __always_inline bool in_slow_start(const struct tcp_sock *tp)
{
	return tp->snd_cwnd < tp->snd_ssthresh;
}

static __always_inline __u32 packets_in_flight(const struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

/* Minimum RTT the stack has seen in its windowed filter (us); ~0U if none yet. */
static __always_inline __u32 stack_min_rtt_us(const struct tcp_sock *tp)
{
	return tp->rtt_min.s[0].v;
}

/*
 * Growth only makes sense when cwnd is what limits sending (RFC 7661): an
 * application-limited flow must not inflate its window. In slow start allow growth
 * while the window is under twice what was actually in flight.
 */
static __always_inline bool cwnd_limited(const struct tcp_sock *tp)
{
	if (BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited))
		return true;
	if (in_slow_start(tp))
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return false;
}

/* RFC 5681 slow start: one segment per segment acked, stopping at ssthresh.
 * Returns the acked segments left over for congestion avoidance. */
static __always_inline __u32 slow_start(struct tcp_sock *tp, __u32 acked)
{
	__u32 w = tp->snd_cwnd + acked;

	if (w > tp->snd_ssthresh)
		w = tp->snd_ssthresh;
	acked -= w - tp->snd_cwnd;
	tp->snd_cwnd = min_t(__u32, w, tp->snd_cwnd_clamp);
	return acked;
}

/* Additive increase of one segment per `w` segments acked, carried in snd_cwnd_cnt. */
static __always_inline void cwnd_add_per(struct tcp_sock *tp, __u32 w, __u32 acked)
{
	__u32 cnt, add;

	if (w == 0)
		w = 1;
	/* A window that shrank below the accumulated credit earns its segment at once. */
	if (tp->snd_cwnd_cnt >= w) {
		tp->snd_cwnd_cnt = 0;
		tp->snd_cwnd++;
	}
	cnt = tp->snd_cwnd_cnt + acked;
	add = cnt / w;
	tp->snd_cwnd_cnt = cnt - add * w;
	tp->snd_cwnd = min_t(__u32, tp->snd_cwnd + add, tp->snd_cwnd_clamp);
}

/* Reno (RFC 5681) growth, the fallback most algorithms use below their own regime. */
static __always_inline void reno_grow(struct tcp_sock *tp, __u32 acked)
{
	if (in_slow_start(tp)) {
		acked = slow_start(tp, acked);
		if (!acked)
			return;
	}
	cwnd_add_per(tp, tp->snd_cwnd, acked);
}

/* Index of the highest set bit, 1-based (0 for 0). */
static __always_inline __u32 fls64_(__u64 x)
{
	__u32 n = 0;
	int i;

	for (i = 32; i > 0; i >>= 1) {
		if (x >> i) {
			x >>= i;
			n += i;
		}
	}
	return x ? n + 1 : n;
}

/*
 * Integer cube and square roots by Newton's method from an over-estimate, with a fixed
 * iteration count: bit-by-bit versions branch on data at every step and the verifier
 * would have to walk every path (2^22 of them for a cube root).
 */
static __always_inline __u32 icbrt64(__u64 x)
{
	__u64 y, y2;
	int i;

	if (x == 0)
		return 0;
	/* 2^ceil(bits/3) >= cbrt(x): Newton then converges from above. */
	y = 1ULL << ((fls64_(x) + 2) / 3);
	for (i = 0; i < 7; i++) {
		y2 = y * y;
		y = (2 * y + x / y2) / 3; /* stays >= 1 since x >= 1 */
	}
	if (y * y * y > x)
		y--;
	if (y * y * y > x)
		y--;
	return (__u32)y;
}

static __always_inline __u64 isqrt64(__u64 x)
{
	__u64 y;
	int i;

	if (x == 0)
		return 0;
	y = 1ULL << ((fls64_(x) + 1) / 2);
	for (i = 0; i < 7; i++)
		y = (y + x / y) / 2;
	if (y * y > x)
		y--;
	return y;
}

#endif /* CC_COMMON_H */
