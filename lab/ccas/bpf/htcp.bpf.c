// SPDX-License-Identifier: GPL-2.0
/*
 * H-TCP (Leith, Shorten, "H-TCP: TCP for high-speed and long-distance networks",
 * PFLDnet 2004; draft-leith-tcp-htcp-06) with the Linux defaults: RTT scaling and the
 * bandwidth switch on, Delta_L = 1 s, beta adapted in [0.5, 0.8].
 *
 * alpha grows with the time since the last congestion event:
 *     alpha(D) = 1 + 10 (D - D_L) + ((D - D_L) / 2)^2   for D > D_L, else 1,
 * scaled by 2 (1 - beta) so competing flows stay fair, and by minRTT / 100 ms so flows
 * with different RTTs converge. beta = minRTT / maxRTT (queue drained at the backoff),
 * but 0.5 whenever the throughput at the last two congestion events differed > 20%.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, beta_min, 64, 128, "lowest backoff factor, /128 (64 = 0.5)");
PARAM(__u32, beta_max, 102, 128, "highest backoff factor, /128 (102 = 0.8)");
PARAM(__u32, delta_l_ms, 1000, 1, "D_L: low-speed period after a congestion event (ms)");
PARAM(__u32, use_rtt_scaling, 1, 1, "1: scale alpha by minRTT / 100 ms");
PARAM(__u32, use_bandwidth_switch, 1, 1, "1: beta = beta_min when throughput changed > 20%");

struct htcp {
	__u32 alpha;        /* segments per RTT, /128 */
	__u32 beta;         /* /128 */
	__u32 min_rtt;      /* us */
	__u32 max_rtt;      /* us */
	__u32 packetcount;  /* segments ACKed in the current throughput sample */
	__u32 bi;           /* smoothed throughput, segments/s */
	__u32 max_b;        /* highest throughput since the last congestion event */
	__u32 old_max_b;    /* ... and before it */
	__u32 loss_cwnd;
	__u32 modeswitch;   /* 0 right after a bandwidth switch: next backoff uses beta_min */
	__u64 last_cong;    /* us */
	__u64 undo_last_cong;
	__u64 lasttime;     /* start of the current throughput sample, us */
};
CA_PRIV_CHECK(struct htcp);

CC_PROG(void, htcp_init, struct sock *sk)
{
	struct htcp *ca = ca_priv(sk);
	__u64 now = now_us(tcp_sk(sk));

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->alpha = 128;
	ca->beta = beta_min;
	ca->last_cong = now;
	ca->lasttime = now;
}

/* RTT bounds: minRTT is the propagation delay; maxRTT may rise only 20 ms per sample so a
 * single delayed ACK cannot fake a deep queue. */
static __always_inline void htcp_rtt(struct sock *sk, struct htcp *ca, __u32 rtt)
{
	__u8 state = BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state);

	if (ca->min_rtt == 0 || rtt < ca->min_rtt)
		ca->min_rtt = rtt;
	if (state == TCP_CA_Open) {
		if (ca->max_rtt < ca->min_rtt)
			ca->max_rtt = ca->min_rtt;
		if (ca->max_rtt < rtt && rtt <= ca->max_rtt + 20000)
			ca->max_rtt = rtt;
	}
}

/* Throughput, sampled over at least one minRTT, smoothed 3/4 old + 1/4 new. */
static __always_inline void htcp_bw(struct sock *sk, struct htcp *ca, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 now = now_us(tp), dt;
	__u8 state = BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state);

	if (state != TCP_CA_Open && state != TCP_CA_Disorder) {
		ca->packetcount = 0;
		ca->lasttime = now;
		return;
	}
	ca->packetcount += acked;
	dt = now - ca->lasttime;
	if (ca->packetcount >= tp->snd_cwnd - (ca->alpha >> 7 ? ca->alpha >> 7 : 1) &&
	    dt >= ca->min_rtt && dt > 0) {
		__u32 cur = (__u64)ca->packetcount * USEC_PER_SEC / dt;

		if (ca->modeswitch) {
			ca->bi = (3 * ca->bi + cur) / 4;
			if (ca->bi > ca->max_b)
				ca->max_b = ca->bi;
		} else {
			ca->bi = cur;
			ca->max_b = cur;
			ca->modeswitch = 1;
		}
		ca->packetcount = 0;
		ca->lasttime = now;
	}
}

CC_PROG(void, htcp_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct htcp *ca = ca_priv(sk);

	if (sample->rtt_us > 0)
		htcp_rtt(sk, ca, sample->rtt_us);
	if (use_bandwidth_switch)
		htcp_bw(sk, ca, sample->pkts_acked);
}

/* At a congestion event: choose beta for this backoff (draft section 4). */
static __always_inline void htcp_beta_update(struct htcp *ca)
{
	if (use_bandwidth_switch) {
		__u64 maxb = ca->max_b, old = ca->old_max_b;

		ca->old_max_b = ca->max_b;
		/* Throughput moved more than 20%: the path changed, back off hard. */
		if (!(5 * maxb >= 4 * old && 5 * maxb <= 6 * old)) {
			ca->beta = beta_min;
			ca->modeswitch = 0;
			return;
		}
	}
	if (ca->modeswitch && ca->min_rtt > 10000 && ca->max_rtt) {
		__u32 b = ((__u64)ca->min_rtt << 7) / ca->max_rtt;

		ca->beta = clamp_t(__u32, b, beta_min, beta_max);
	} else {
		ca->beta = beta_min;
		ca->modeswitch = 1;
	}
}

static __always_inline void htcp_alpha_update(struct htcp *ca, __u64 now)
{
	__u64 factor = 128, diff = now - ca->last_cong, dl = (__u64)delta_l_ms * 1000;

	if (diff > dl) {
		__u64 d_ms = (diff - dl) / 1000;

		if (d_ms > 10000000)
			d_ms = 10000000;
		/* 1 + 10 d + (d/2)^2 with d in seconds, in 1/128 units. */
		factor += 1280 * d_ms / 1000 + 32 * d_ms * d_ms / 1000000;
	}
	if (use_rtt_scaling && ca->min_rtt) {
		/* Scale by minRTT / 100 ms, limited to [0.1, 2]. */
		__u64 s = (__u64)ca->min_rtt;

		s = clamp_t(__u64, s, 10000, 200000);
		factor = factor * s / 100000;
	}
	factor = 2 * factor * (128 - ca->beta) / 128;
	ca->alpha = factor ? (__u32)min_t(__u64, factor, 1U << 30) : 128;
}

CC_PROG(void, htcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct htcp *ca = ca_priv(sk);

	if (!cwnd_limited(tp))
		return;
	if (in_slow_start(tp)) {
		slow_start(tp, acked);
		return;
	}
	htcp_alpha_update(ca, now_us(tp));
	/* alpha/128 segments per RTT: alpha/(128 cwnd) per ACKed segment. */
	cwnd_add_per(tp, tp->snd_cwnd * 128, acked * ca->alpha);
}

CC_PROG(__u32, htcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct htcp *ca = ca_priv(sk);

	htcp_beta_update(ca);
	ca->loss_cwnd = tp->snd_cwnd;
	return max_t(__u32, ((__u64)tp->snd_cwnd * ca->beta) >> 7, 2);
}

CC_PROG(__u32, htcp_undo_cwnd, struct sock *sk)
{
	struct htcp *ca = ca_priv(sk);

	if (ca->undo_last_cong) {
		ca->last_cong = ca->undo_last_cong;
		ca->undo_last_cong = 0;
	}
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ca->loss_cwnd);
}

CC_PROG(void, htcp_set_state, struct sock *sk, __u8 new_state)
{
	struct htcp *ca = ca_priv(sk);
	__u64 now = now_us(tcp_sk(sk));

	switch (new_state) {
	case TCP_CA_Open:
		/* Leaving recovery: D restarts from here. */
		if (ca->undo_last_cong) {
			ca->last_cong = now;
			ca->undo_last_cong = 0;
		}
		break;
	case TCP_CA_CWR:
	case TCP_CA_Recovery:
	case TCP_CA_Loss:
		/* Remember the old epoch in case the reduction is undone. */
		ca->undo_last_cong = ca->last_cong;
		ca->packetcount = 0;
		ca->lasttime = now;
		if (new_state == TCP_CA_Loss)
			ca->last_cong = now;
		break;
	}
}

SEC(".struct_ops.link")
struct tcp_congestion_ops htcp_ops = {
	.init = (void *)htcp_init,
	.ssthresh = (void *)htcp_ssthresh,
	.cong_avoid = (void *)htcp_cong_avoid,
	.set_state = (void *)htcp_set_state,
	.undo_cwnd = (void *)htcp_undo_cwnd,
	.pkts_acked = (void *)htcp_pkts_acked,
	.name = "cc_htcp",
};
