// SPDX-License-Identifier: GPL-2.0
/*
 * BIC-TCP (Xu, Harfoush, Rhee, "Binary Increase Congestion Control for Fast, Long
 * Distance Networks", INFOCOM 2004) with the Linux default constants: beta 819/1024,
 * S_max 16, binary-search divisor B = 4, Reno below 14 segments, smooth part 20.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, beta, 819, 1024, "multiplicative decrease factor, /1024 (819 = 0.8)");
PARAM(__u32, max_increment, 16, 1, "S_max: largest increase per RTT (segments)");
PARAM(__u32, low_window, 14, 1, "behave like Reno at or below this cwnd (segments)");
PARAM(__u32, smooth_part, 20, 1, "RTTs spent creeping across W_max (smoothing)");
PARAM(__u32, bic_b, 4, 1, "binary search divisor B: jump to (W_max - cwnd)/B per RTT");
PARAM(__u32, fast_convergence, 1, 1, "1: lower W_max further when it shrank (fairness)");
PARAM(__u32, initial_ssthresh, 0, 1, "initial ssthresh in segments (0 = stack default)");

struct bic {
	__u32 cnt;           /* ACKed segments per one-segment increase */
	__u32 last_max_cwnd; /* W_max: the window where loss last happened */
	__u32 loss_cwnd;     /* cwnd at the last reduction, for undo */
	__u32 last_cwnd;     /* cwnd when cnt was last computed */
};
CA_PRIV_CHECK(struct bic);

CC_PROG(void, bic_init, struct sock *sk)
{
	struct bic *ca = ca_priv(sk);

	ca->cnt = 0;
	ca->last_max_cwnd = 0;
	ca->loss_cwnd = 0;
	ca->last_cwnd = 0;
	if (initial_ssthresh)
		tcp_sk(sk)->snd_ssthresh = initial_ssthresh;
}

/* Binary search toward W_max, then max probing above it (paper, Fig. 2). */
static __always_inline void bic_update(struct bic *ca, __u32 cwnd)
{
	__u32 b = bic_b ? bic_b : 4, smax = max_increment ? max_increment : 1;
	__u32 wmax = ca->last_max_cwnd, cnt;

	ca->last_cwnd = cwnd;
	if (cwnd <= low_window) {
		ca->cnt = cwnd; /* Reno: one segment per RTT */
		return;
	}
	if (cwnd < wmax) {
		__u32 dist = (wmax - cwnd) / b;

		if (dist > smax)
			cnt = cwnd / smax;                  /* far below: additive S_max */
		else if (dist <= 1)
			cnt = cwnd * smooth_part / b;       /* close: creep up to W_max */
		else
			cnt = cwnd / dist;                  /* binary search step */
	} else {
		if (cwnd < wmax + b)
			cnt = cwnd * smooth_part / b;       /* just past W_max: slow start of probing */
		else if (cwnd < wmax + smax * (b - 1))
			cnt = cwnd * (b - 1) / (cwnd - wmax); /* accelerate away from W_max */
		else
			cnt = cwnd / smax;                  /* linear max probing */
	}
	/* No loss seen yet: do not dawdle on a fresh connection. */
	if (wmax == 0 && cnt > 20)
		cnt = 20;
	ca->cnt = cnt ? cnt : 1;
}

CC_PROG(void, bic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bic *ca = ca_priv(sk);

	if (!cwnd_limited(tp))
		return;
	if (in_slow_start(tp)) {
		acked = slow_start(tp, acked);
		if (!acked)
			return;
	}
	bic_update(ca, tp->snd_cwnd);
	cwnd_add_per(tp, ca->cnt, acked);
}

CC_PROG(__u32, bic_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bic *ca = ca_priv(sk);
	__u32 cwnd = tp->snd_cwnd;

	if (cwnd < ca->last_max_cwnd && fast_convergence)
		ca->last_max_cwnd = (__u64)cwnd * (1024 + beta) / 2048;
	else
		ca->last_max_cwnd = cwnd;
	ca->loss_cwnd = cwnd;
	if (cwnd <= low_window)
		return max_t(__u32, cwnd >> 1, 2);
	return max_t(__u32, (__u64)cwnd * beta / 1024, 2);
}

CC_PROG(__u32, bic_undo_cwnd, struct sock *sk)
{
	struct bic *ca = ca_priv(sk);

	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ca->loss_cwnd);
}

CC_PROG(void, bic_set_state, struct sock *sk, __u8 new_state)
{
	struct bic *ca = ca_priv(sk);

	if (new_state == TCP_CA_Loss) {
		ca->cnt = 0;
		ca->last_max_cwnd = 0;
		ca->last_cwnd = 0;
	}
}

SEC(".struct_ops.link")
struct tcp_congestion_ops bic_ops = {
	.init = (void *)bic_init,
	.ssthresh = (void *)bic_ssthresh,
	.cong_avoid = (void *)bic_cong_avoid,
	.set_state = (void *)bic_set_state,
	.undo_cwnd = (void *)bic_undo_cwnd,
	.name = "cc_bic",
};
