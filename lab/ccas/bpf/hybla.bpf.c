// SPDX-License-Identifier: GPL-2.0
/*
 * TCP Hybla (Caini, Firrincieli, "TCP Hybla: a TCP enhancement for heterogeneous
 * networks", Int. J. Satellite Commun. Netw. 2004). Growth is made independent of RTT
 * by normalising to a reference RTT0 (Linux default 25 ms), rho = RTT / RTT0 >= 1:
 *     slow start:  cwnd += 2^rho - 1   per ACK
 *     avoidance:   cwnd += rho^2 / cwnd per ACK
 * Loss response is Reno's halving.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, rtt0_ms, 25, 1, "reference RTT0 (ms): flows with this RTT behave like Reno");
PARAM(__u32, max_rho, 16, 1, "cap on rho so a huge RTT cannot make slow start explode");

/* 2^(k/8) * 128 for k = 0..7: the fractional part of 2^rho with rho in 1/8 units. */
/* (const volatile keeps it in .rodata proper; clang would put a plain const array in a
 * mergeable-constants section libbpf cannot map.) */
const volatile __u32 pow2_frac8[8] = {128, 140, 152, 166, 181, 197, 215, 235};

struct hybla {
	__u32 rho8;       /* rho in 1/8 units, >= 8 */
	__u32 min_rtt;    /* us */
	__u32 frac;       /* cwnd fraction carried between ACKs, 1/128 segment */
	__u32 loss_cwnd;
};
CA_PRIV_CHECK(struct hybla);

static __always_inline void hybla_set_rho(struct hybla *ca)
{
	__u64 r = (__u64)ca->min_rtt * 8 / ((__u64)(rtt0_ms ? rtt0_ms : 1) * 1000);

	ca->rho8 = clamp_t(__u32, r, 8, max_rho * 8);
}

CC_PROG(void, hybla_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct hybla *ca = ca_priv(sk);

	ca->frac = 0;
	ca->loss_cwnd = 0;
	ca->min_rtt = tp->srtt_us >> 3; /* the handshake's RTT until ACKs refine it */
	hybla_set_rho(ca);
}

CC_PROG(void, hybla_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct hybla *ca = ca_priv(sk);

	if (sample->rtt_us > 0 && (ca->min_rtt == 0 || (__u32)sample->rtt_us < ca->min_rtt)) {
		ca->min_rtt = sample->rtt_us;
		hybla_set_rho(ca);
	}
}

CC_PROG(void, hybla_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct hybla *ca = ca_priv(sk);
	__u32 rho8 = ca->rho8, inc, add;
	__u64 total;
	bool ss = in_slow_start(tp);

	if (!cwnd_limited(tp))
		return;
	if (ss) {
		__u32 ip = (rho8 >> 3) & 31;

		inc = (pow2_frac8[rho8 & 7] << ip) - 128;        /* 2^rho - 1 */
	} else {
		inc = (__u64)rho8 * rho8 * 2 / tp->snd_cwnd;   /* rho^2 / cwnd, 1/128 units */
		if (inc == 0)
			inc = 1;
	}
	total = (__u64)ca->frac + (__u64)inc * acked;
	add = (__u32)min_t(__u64, total >> 7, 1U << 20);
	ca->frac = total & 127;
	if (ss && tp->snd_cwnd + add > tp->snd_ssthresh)
		add = tp->snd_ssthresh > tp->snd_cwnd ? tp->snd_ssthresh - tp->snd_cwnd : 0;
	tp->snd_cwnd = min_t(__u32, tp->snd_cwnd + add, tp->snd_cwnd_clamp);
}

CC_PROG(__u32, hybla_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);

	((struct hybla *)ca_priv(sk))->loss_cwnd = tp->snd_cwnd;
	return max_t(__u32, tp->snd_cwnd >> 1, 2);
}

CC_PROG(__u32, hybla_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct hybla *)ca_priv(sk))->loss_cwnd);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops hybla_ops = {
	.init = (void *)hybla_init,
	.ssthresh = (void *)hybla_ssthresh,
	.cong_avoid = (void *)hybla_cong_avoid,
	.undo_cwnd = (void *)hybla_undo_cwnd,
	.pkts_acked = (void *)hybla_pkts_acked,
	.name = "cc_hybla",
};
