// SPDX-License-Identifier: GPL-2.0
/*
 * TCP Vegas (Brakmo, Peterson, "TCP Vegas: End to End Congestion Avoidance on a Global
 * Internet", IEEE JSAC 1995) with the Linux defaults alpha = 2, beta = 4, gamma = 1.
 * Once per RTT, diff = cwnd (RTT - BaseRTT) / BaseRTT estimates the segments this flow
 * keeps queued; Vegas holds diff between alpha and beta by moving cwnd one segment per
 * RTT, and leaves slow start as soon as diff exceeds gamma. Losses are handled as Reno.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, alpha, 2, 1, "grow when fewer than alpha segments are queued");
PARAM(__u32, beta, 4, 1, "shrink when more than beta segments are queued");
PARAM(__u32, gamma, 1, 1, "leave slow start when more than gamma segments are queued");

struct vegas {
	__u32 enabled;     /* Vegas only steers in the Open state */
	__u32 beg_snd_nxt; /* round boundary */
	__u32 cnt_rtt;     /* RTT samples this round */
	__u32 min_rtt;     /* smallest RTT this round, us (queueing removes noise) */
	__u32 base_rtt;    /* smallest RTT ever, us */
	__u32 loss_cwnd;
};
CA_PRIV_CHECK(struct vegas);

static __always_inline void vegas_enable(struct sock *sk, struct vegas *ca)
{
	ca->enabled = 1;
	ca->beg_snd_nxt = tcp_sk(sk)->snd_nxt;
	ca->cnt_rtt = 0;
	ca->min_rtt = 0x7fffffff;
}

CC_PROG(void, vegas_init, struct sock *sk)
{
	struct vegas *ca = ca_priv(sk);

	ca->base_rtt = 0x7fffffff;
	ca->loss_cwnd = 0;
	vegas_enable(sk, ca);
}

CC_PROG(void, vegas_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct vegas *ca = ca_priv(sk);
	__u32 rtt;

	if (sample->rtt_us < 0)
		return;
	rtt = sample->rtt_us + 1; /* never zero */
	if (rtt < ca->base_rtt)
		ca->base_rtt = rtt;
	if (rtt < ca->min_rtt)
		ca->min_rtt = rtt;
	ca->cnt_rtt++;
}

CC_PROG(void, vegas_set_state, struct sock *sk, __u8 new_state)
{
	struct vegas *ca = ca_priv(sk);

	if (new_state == TCP_CA_Open)
		vegas_enable(sk, ca);
	else
		ca->enabled = 0;
}

CC_PROG(void, vegas_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	/* After idle or a restart, measure afresh. */
	if (ev == CA_EVENT_CWND_RESTART || ev == CA_EVENT_TX_START)
		vegas_enable(sk, ca_priv(sk));
}

CC_PROG(void, vegas_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct vegas *ca = ca_priv(sk);

	if (!ca->enabled) {
		if (cwnd_limited(tp))
			reno_grow(tp, acked);
		return;
	}
	if ((__s32)(ack - ca->beg_snd_nxt) > 0) {
		/* One RTT since the last decision. */
		ca->beg_snd_nxt = tp->snd_nxt;
		if (ca->cnt_rtt <= 2) {
			/* Too few samples (delayed ACKs): fall back to Reno. */
			if (cwnd_limited(tp))
				reno_grow(tp, acked);
		} else {
			__u32 rtt = ca->min_rtt, cwnd = tp->snd_cwnd;
			__u64 target = (__u64)cwnd * ca->base_rtt / rtt;
			__u32 diff = (__u64)cwnd * (rtt - ca->base_rtt) / ca->base_rtt;

			if (diff > gamma && in_slow_start(tp)) {
				/* Queue building in slow start: drop to the expected rate and
				 * switch to avoidance. */
				set_cwnd(tp, min_t(__u64, cwnd, target + 1));
				tp->snd_ssthresh = min_t(__u32, tp->snd_ssthresh, tp->snd_cwnd - 1);
			} else if (in_slow_start(tp)) {
				slow_start(tp, acked);
			} else if (diff > beta) {
				set_cwnd(tp, cwnd - 1);
				tp->snd_ssthresh = min_t(__u32, tp->snd_ssthresh, tp->snd_cwnd - 1);
			} else if (diff < alpha) {
				set_cwnd(tp, cwnd + 1);
			}
			/* ssthresh tracks a window we know the path can hold. */
			if (!in_slow_start(tp))
				tp->snd_ssthresh = max_t(__u32, tp->snd_ssthresh,
							 (tp->snd_cwnd >> 1) + (tp->snd_cwnd >> 2));
		}
		ca->cnt_rtt = 0;
		ca->min_rtt = 0x7fffffff;
	} else if (in_slow_start(tp)) {
		slow_start(tp, acked);
	}
}

CC_PROG(__u32, vegas_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);

	((struct vegas *)ca_priv(sk))->loss_cwnd = tp->snd_cwnd;
	return max_t(__u32, tp->snd_cwnd >> 1, 2);
}

CC_PROG(__u32, vegas_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct vegas *)ca_priv(sk))->loss_cwnd);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops vegas_ops = {
	.init = (void *)vegas_init,
	.ssthresh = (void *)vegas_ssthresh,
	.cong_avoid = (void *)vegas_cong_avoid,
	.set_state = (void *)vegas_set_state,
	.cwnd_event = (void *)vegas_cwnd_event,
	.undo_cwnd = (void *)vegas_undo_cwnd,
	.pkts_acked = (void *)vegas_pkts_acked,
	.name = "cc_vegas",
};
