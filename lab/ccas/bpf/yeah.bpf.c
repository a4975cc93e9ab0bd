// SPDX-License-Identifier: GPL-2.0
/*
 * YeAH-TCP (Baiocchi, Castellani, Vacirca, "YeAH-TCP: Yet Another Highspeed TCP",
 * PFLDnet 2007) with the Linux default constants. Two modes chosen once per RTT from
 * the estimated queue Q = cwnd (RTT - BaseRTT) / RTT and the delay ratio
 * L = (RTT - BaseRTT) / BaseRTT:
 *   fast mode (Q < alpha and L < 1/phy): Scalable-TCP growth;
 *   slow mode: Reno growth, and "precautionary decongestion" drains an excess queue
 *   by shrinking cwnd by Q (at most cwnd/2^epsilon).
 * On loss, a flow that has been in fast mode drops only the queue it built (at least
 * cwnd/2^delta); one that has been Reno-like for rho RTTs halves.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, alpha, 80, 1, "largest queue (segments) tolerated in fast mode");
PARAM(__u32, gamma, 1, 1, "fraction of the queue removed by decongestion, 1/gamma");
PARAM(__u32, delta, 3, 1, "loss decrease is at least cwnd >> delta");
PARAM(__u32, epsilon, 1, 1, "decongestion removes at most cwnd >> epsilon");
PARAM(__u32, phy, 8, 1, "fast mode only while queueing delay < BaseRTT / phy");
PARAM(__u32, rho, 16, 1, "RTTs in slow mode after which a loss halves cwnd");
PARAM(__u32, zeta, 50, 1, "fast-mode RTTs after which the Reno shadow restarts");
PARAM(__u32, stcp_ai_cnt, 100, 1, "fast mode: one segment per this many ACKs (Scalable)");

struct yeah {
	__u32 beg_snd_nxt;
	__u32 cnt_rtt;
	__u32 min_rtt;
	__u32 base_rtt;
	__u32 last_q;        /* queue estimate at the last round, segments */
	__u32 doing_reno_now;/* consecutive slow-mode RTTs */
	__u32 reno_count;    /* Reno shadow window */
	__u32 fast_count;    /* consecutive fast-mode RTTs */
	__u32 loss_cwnd;
};
CA_PRIV_CHECK(struct yeah);

static __always_inline void yeah_new_round(struct tcp_sock *tp, struct yeah *ca)
{
	ca->beg_snd_nxt = tp->snd_nxt;
	ca->cnt_rtt = 0;
	ca->min_rtt = 0x7fffffff;
}

CC_PROG(void, yeah_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct yeah *ca = ca_priv(sk);

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->base_rtt = 0x7fffffff;
	ca->reno_count = 2;
	yeah_new_round(tp, ca);
}

CC_PROG(void, yeah_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct yeah *ca = ca_priv(sk);
	__u32 rtt;

	if (sample->rtt_us < 0)
		return;
	rtt = sample->rtt_us + 1;
	if (rtt < ca->base_rtt)
		ca->base_rtt = rtt;
	if (rtt < ca->min_rtt)
		ca->min_rtt = rtt;
	ca->cnt_rtt++;
}

CC_PROG(void, yeah_set_state, struct sock *sk, __u8 new_state)
{
	if (new_state == TCP_CA_Open)
		yeah_new_round(tcp_sk(sk), ca_priv(sk));
}

CC_PROG(void, yeah_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct yeah *ca = ca_priv(sk);

	if (!cwnd_limited(tp))
		return;
	if (in_slow_start(tp)) {
		slow_start(tp, acked);
	} else if (!ca->doing_reno_now) {
		/* Fast mode: Scalable TCP. */
		cwnd_add_per(tp, min_t(__u32, tp->snd_cwnd, stcp_ai_cnt), acked);
	} else {
		cwnd_add_per(tp, tp->snd_cwnd, acked);
	}

	if ((__s32)(ack - ca->beg_snd_nxt) <= 0)
		return;
	/* Once per RTT: pick the mode. */
	if (ca->cnt_rtt > 2 && ca->min_rtt != 0x7fffffff) {
		__u32 rtt = ca->min_rtt, base = ca->base_rtt, cwnd = tp->snd_cwnd;
		__u32 qdelay = rtt > base ? rtt - base : 0;
		__u32 queue = (__u64)cwnd * qdelay / rtt;

		if (queue > alpha || (__u64)qdelay * phy > base) {
			/* Slow mode; drain an excess queue if we are above the Reno shadow. */
			if (queue > alpha && cwnd > ca->reno_count) {
				__u32 red = min_t(__u32, queue / (gamma ? gamma : 1), cwnd >> (epsilon & 31));

				cwnd -= red;
				cwnd = max_t(__u32, cwnd, ca->reno_count);
				set_cwnd(tp, cwnd);
				tp->snd_ssthresh = tp->snd_cwnd;
			}
			if (ca->reno_count <= 2)
				ca->reno_count = max_t(__u32, tp->snd_cwnd >> 1, 2);
			else
				ca->reno_count++;
			ca->doing_reno_now = min_t(__u32, ca->doing_reno_now + 1, 0xffffff);
		} else {
			ca->fast_count++;
			if (ca->fast_count > zeta) {
				ca->reno_count = 2;
				ca->fast_count = 0;
			}
			ca->doing_reno_now = 0;
		}
		ca->last_q = queue;
	}
	yeah_new_round(tp, ca);
}

CC_PROG(__u32, yeah_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct yeah *ca = ca_priv(sk);
	__u32 cwnd = tp->snd_cwnd, red;

	ca->loss_cwnd = cwnd;
	if (ca->doing_reno_now < rho) {
		/* Fast-mode flow: give back the queue it built. */
		red = min_t(__u32, ca->last_q, max_t(__u32, cwnd >> 1, 2));
		red = max_t(__u32, red, cwnd >> (delta & 31));
	} else {
		red = max_t(__u32, cwnd >> 1, 2);
	}
	ca->fast_count = 0;
	ca->reno_count = max_t(__u32, ca->reno_count >> 1, 2);
	return max_t(__u32, cwnd > red ? cwnd - red : 2, 2);
}

CC_PROG(__u32, yeah_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct yeah *)ca_priv(sk))->loss_cwnd);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops yeah_ops = {
	.init = (void *)yeah_init,
	.ssthresh = (void *)yeah_ssthresh,
	.cong_avoid = (void *)yeah_cong_avoid,
	.set_state = (void *)yeah_set_state,
	.undo_cwnd = (void *)yeah_undo_cwnd,
	.pkts_acked = (void *)yeah_pkts_acked,
	.name = "cc_yeah",
};
