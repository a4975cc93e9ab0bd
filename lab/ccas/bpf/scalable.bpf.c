// SPDX-License-Identifier: GPL-2.0
/*
 * Scalable TCP (Kelly, "Scalable TCP: Improving Performance in Highspeed Wide Area
 * Networks", CCR 2003): cwnd += a per ACK, cwnd -= b*cwnd on loss, with the Linux
 * defaults a = 0.01 (one segment per 100 ACKs, Reno below 100) and b = 1/8.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, ai_cnt, 100, 1, "ACKs per one-segment increase (1/a); Reno while cwnd < ai_cnt");
PARAM(__u32, md_shift, 3, 1, "decrease by cwnd >> md_shift on loss (3 = 1/8, i.e. beta 0.875)");

struct scalable {
	__u32 loss_cwnd;
};
CA_PRIV_CHECK(struct scalable);

CC_PROG(void, scalable_init, struct sock *sk)
{
	((struct scalable *)ca_priv(sk))->loss_cwnd = 0;
}

CC_PROG(void, scalable_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (!cwnd_limited(tp))
		return;
	if (in_slow_start(tp)) {
		acked = slow_start(tp, acked);
		if (!acked)
			return;
	}
	/* Fixed per-ACK increase: one segment every ai_cnt ACKs, capped at Reno's rate. */
	cwnd_add_per(tp, min_t(__u32, tp->snd_cwnd, ai_cnt), acked);
}

CC_PROG(__u32, scalable_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 cwnd = tp->snd_cwnd;

	((struct scalable *)ca_priv(sk))->loss_cwnd = cwnd;
	return max_t(__u32, cwnd - (cwnd >> (md_shift & 31)), 2);
}

CC_PROG(__u32, scalable_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct scalable *)ca_priv(sk))->loss_cwnd);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops scalable_ops = {
	.init = (void *)scalable_init,
	.ssthresh = (void *)scalable_ssthresh,
	.cong_avoid = (void *)scalable_cong_avoid,
	.undo_cwnd = (void *)scalable_undo_cwnd,
	.name = "cc_scalable",
};
