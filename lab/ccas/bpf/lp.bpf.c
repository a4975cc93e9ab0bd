// SPDX-License-Identifier: GPL-2.0
/*
 * TCP-LP, low priority (Kuzmanovic, Knightly, "TCP-LP: A Distributed Algorithm for
 * Low Priority Data Transfer", INFOCOM 2003). It yields to any other traffic by
 * reacting to *early* congestion: the one-way delay, taken from TCP timestamps
 * (peer's TSval minus our echoed TSecr), smoothed 7/8, crossing
 *     d_min + delta (d_max - d_min),  delta = 15%,
 * halves cwnd and starts an inference period of 3 RTTs; a second indication inside it
 * drops cwnd to the minimum. No growth during the inference period; Reno otherwise.
 * Without timestamps it is plain Reno. Assumes the peer's timestamp clock ticks in ms
 * (Linux and most servers); the Linux module also estimates other rates.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, delta_pct, 15, 100, "early-congestion threshold within [d_min, d_max], /100");
PARAM(__u32, inference_rtts, 3, 1, "inference period after a reduction, in RTTs");
PARAM(__u32, min_range_ms, 3, 1, "ignore indications until d_max - d_min spans this many ms");
PARAM(__u32, tolerance_ms, 1, 1, "smoothed delay must exceed the threshold by this much (ms)");
PARAM(__u32, min_cwnd, 2, 1, "cwnd after a repeated indication (paper: 1; see below)");

struct lp {
	__s64 sowd8;      /* smoothed one-way delay (+ clock offset), 1/8 ms */
	__s32 owd_min;    /* ms (+ offset) */
	__s32 owd_max;
	__u64 last_drop;  /* us of the last early-congestion reduction; 0 = none */
	__u32 have_owd;
	__u32 loss_cwnd;
};
CA_PRIV_CHECK(struct lp);

CC_PROG(void, lp_init, struct sock *sk)
{
	struct lp *ca = ca_priv(sk);

	__builtin_memset(ca, 0, sizeof(*ca));
}

static __always_inline bool lp_in_inference(struct tcp_sock *tp, struct lp *ca)
{
	__u64 rtt = tp->srtt_us >> 3;

	return ca->last_drop && now_us(tp) - ca->last_drop < inference_rtts * rtt;
}

CC_PROG(void, lp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);

	/* Stay put while inferring whether the last indication was real. */
	if (lp_in_inference(tp, ca_priv(sk)))
		return;
	if (cwnd_limited(tp))
		reno_grow(tp, acked);
}

CC_PROG(void, lp_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct lp *ca = ca_priv(sk);
	__s32 owd;
	__s64 thr8;
	__u64 now = now_us(tp), rtt;

	/* No echoed timestamp: timestamps are off, stay Reno. */
	if (!tp->rx_opt.rcv_tsecr)
		return;
	owd = (__s32)(tp->rx_opt.rcv_tsval - tp->rx_opt.rcv_tsecr);
	if (!ca->have_owd) {
		ca->owd_min = owd;
		ca->owd_max = owd;
		ca->sowd8 = (__s64)owd << 3;
		ca->have_owd = 1;
		return;
	}
	if (owd < ca->owd_min)
		ca->owd_min = owd;
	if (owd > ca->owd_max)
		ca->owd_max = owd;
	ca->sowd8 += owd - (ca->sowd8 >> 3);

	thr8 = ((__s64)ca->owd_min << 3) +
	       (__s64)((((__u64)(__u32)(ca->owd_max - ca->owd_min) << 3) * delta_pct) / 100);
	/* Timestamps tick in ms: a range of a few ticks, or a delay within a tick of
	 * the threshold, is quantisation noise rather than a queue. */
	if ((__u32)(ca->owd_max - ca->owd_min) < min_range_ms ||
	    ca->sowd8 <= thr8 + ((__s64)tolerance_ms << 3))
		return;

	/* Early congestion indication; react at most once per RTT. */
	rtt = tp->srtt_us >> 3;
	if (ca->last_drop && now - ca->last_drop < rtt)
		return;
	/* The paper drops to one segment on a repeated indication; two are kept here:
	 * a lone segment waits out the receiver's delayed-ACK timer, which inflates the
	 * very one-way delay LP measures and would pin it at the floor. */
	if (lp_in_inference(tp, ca))
		tp->snd_cwnd = min_cwnd;
	else
		tp->snd_cwnd = max_t(__u32, tp->snd_cwnd >> 1, min_cwnd);
	tp->snd_ssthresh = max_t(__u32, tp->snd_cwnd, 2);
	ca->last_drop = now ? now : 1;
}

CC_PROG(__u32, lp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);

	((struct lp *)ca_priv(sk))->loss_cwnd = tp->snd_cwnd;
	return max_t(__u32, tp->snd_cwnd >> 1, 2);
}

CC_PROG(__u32, lp_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct lp *)ca_priv(sk))->loss_cwnd);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops lp_ops = {
	.init = (void *)lp_init,
	.ssthresh = (void *)lp_ssthresh,
	.cong_avoid = (void *)lp_cong_avoid,
	.undo_cwnd = (void *)lp_undo_cwnd,
	.pkts_acked = (void *)lp_pkts_acked,
	.name = "cc_lp",
};
