// SPDX-License-Identifier: GPL-2.0
/*
 * TCP-Illinois (Liu, Basar, Srikant, "TCP-Illinois: a loss and delay-based congestion
 * control algorithm for high-speed networks", VALUETOOLS 2006) with the Linux default
 * constants. Loss decides the direction, queueing delay the amounts:
 *   alpha (increase per RTT) falls from 10 to 0.3 as the average queueing delay d_a
 *   rises from d_1 = d_m/100 to d_m (the largest queueing delay seen), hyperbolically;
 *   beta (decrease on loss) rises from 1/8 to 1/2 as d_a goes from d_m/10 to 8 d_m/10.
 * Below 15 segments it is Reno (alpha 1, beta 1/2).
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, alpha_min, 307, 1024, "smallest increase per RTT, /1024 (307 = 0.3)");
PARAM(__u32, alpha_max, 10240, 1024, "largest increase per RTT, /1024 (10240 = 10)");
PARAM(__u32, beta_min, 128, 1024, "smallest decrease on loss, /1024 (128 = 1/8)");
PARAM(__u32, beta_max, 512, 1024, "largest decrease on loss, /1024 (512 = 1/2)");
PARAM(__u32, win_thresh, 15, 1, "Reno below this cwnd (segments)");
PARAM(__u32, theta, 5, 1, "RTTs of low delay before alpha returns to alpha_max");

#define ALPHA_BASE 1024
#define BETA_BASE 512

struct illinois {
	__u64 sum_rtt;    /* this RTT's samples */
	__u32 cnt_rtt;
	__u32 end_seq;    /* round boundary */
	__u32 base_rtt;   /* us: propagation delay estimate */
	__u32 max_rtt;    /* us */
	__u32 alpha;      /* /1024 */
	__u32 beta;       /* /1024 */
	__u32 rtt_low;    /* consecutive RTTs with low delay */
	__u32 loss_cwnd;
};
CA_PRIV_CHECK(struct illinois);

static __always_inline void ill_new_round(struct tcp_sock *tp, struct illinois *ca)
{
	ca->end_seq = tp->snd_nxt;
	ca->cnt_rtt = 0;
	ca->sum_rtt = 0;
}

CC_PROG(void, ill_init, struct sock *sk)
{
	struct illinois *ca = ca_priv(sk);

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->alpha = alpha_max;
	ca->beta = BETA_BASE;
	ca->base_rtt = 0x7fffffff;
	ill_new_round(tcp_sk(sk), ca);
}

CC_PROG(void, ill_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct illinois *ca = ca_priv(sk);
	__u32 rtt = sample->rtt_us;

	if (sample->rtt_us <= 0)
		return;
	if (rtt < ca->base_rtt)
		ca->base_rtt = rtt;
	if (rtt > ca->max_rtt)
		ca->max_rtt = rtt;
	ca->cnt_rtt++;
	ca->sum_rtt += rtt;
}

/* alpha = k1 / (k2 + d_a): alpha_max at d_1, alpha_min at d_m (paper eq. 4). */
static __always_inline __u32 ill_alpha(struct illinois *ca, __u32 da, __u32 dm)
{
	__u32 d1 = dm / 100;

	if (da <= d1) {
		/* Keep the current alpha until the delay has stayed low for theta RTTs. */
		if (ca->rtt_low < theta) {
			ca->rtt_low++;
			return ca->alpha;
		}
		return alpha_max;
	}
	ca->rtt_low = 0;
	{
		__u64 span = dm - d1, amin = alpha_min, amax = alpha_max;
		__u64 k1, k2num, den;

		if (amax <= amin || span == 0)
			return alpha_min;
		/* alpha = (span*amin*amax/(amax-amin)) / (span*amin/(amax-amin) - d1 + da)
		 *       = span*amin*amax / (span*amin + (da - d1)*(amax - amin)). */
		k1 = span * amin * amax;
		k2num = span * amin;
		den = k2num + (__u64)(da - d1) * (amax - amin);
		return den ? (__u32)clamp_t(__u64, k1 / den, amin, amax) : alpha_max;
	}
}

/* beta linear between d_2 = d_m/10 and d_3 = 8 d_m/10 (paper eq. 5). */
static __always_inline __u32 ill_beta(__u32 da, __u32 dm)
{
	__u32 d2 = dm / 10, d3 = (8 * dm) / 10;

	if (da <= d2)
		return beta_min;
	if (da >= d3 || d3 <= d2)
		return beta_max;
	return beta_min + (__u64)(beta_max - beta_min) * (da - d2) / (d3 - d2);
}

static __always_inline void ill_update(struct tcp_sock *tp, struct illinois *ca)
{
	if (tp->snd_cwnd < win_thresh) {
		ca->alpha = ALPHA_BASE;
		ca->beta = BETA_BASE;
	} else if (ca->cnt_rtt > 0 && ca->max_rtt > ca->base_rtt) {
		__u32 avg = ca->sum_rtt / ca->cnt_rtt;
		__u32 dm = ca->max_rtt - ca->base_rtt;
		__u32 da = avg > ca->base_rtt ? avg - ca->base_rtt : 0;

		ca->alpha = ill_alpha(ca, da, dm);
		ca->beta = ill_beta(da, dm);
	}
	ill_new_round(tp, ca);
}

CC_PROG(void, ill_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct illinois *ca = ca_priv(sk);

	if ((__s32)(ack - ca->end_seq) > 0)
		ill_update(tp, ca);
	if (!cwnd_limited(tp))
		return;
	if (in_slow_start(tp)) {
		slow_start(tp, acked);
		return;
	}
	/* alpha/1024 segments per RTT. */
	cwnd_add_per(tp, tp->snd_cwnd * 1024, acked * ca->alpha);
}

CC_PROG(__u32, ill_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct illinois *ca = ca_priv(sk);
	__u32 cwnd = tp->snd_cwnd;

	ca->loss_cwnd = cwnd;
	return max_t(__u32, cwnd - (__u32)(((__u64)cwnd * ca->beta) >> 10), 2);
}

CC_PROG(__u32, ill_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct illinois *)ca_priv(sk))->loss_cwnd);
}

CC_PROG(void, ill_set_state, struct sock *sk, __u8 new_state)
{
	struct illinois *ca = ca_priv(sk);

	/* After an RTO the delay history says nothing about the path any more. */
	if (new_state == TCP_CA_Loss) {
		ca->alpha = ALPHA_BASE;
		ca->beta = BETA_BASE;
		ca->rtt_low = 0;
		ca->base_rtt = 0x7fffffff;
		ca->max_rtt = 0;
		ill_new_round(tcp_sk(sk), ca);
	}
}

SEC(".struct_ops.link")
struct tcp_congestion_ops illinois_ops = {
	.init = (void *)ill_init,
	.ssthresh = (void *)ill_ssthresh,
	.cong_avoid = (void *)ill_cong_avoid,
	.set_state = (void *)ill_set_state,
	.undo_cwnd = (void *)ill_undo_cwnd,
	.pkts_acked = (void *)ill_pkts_acked,
	.name = "cc_illinois",
};
