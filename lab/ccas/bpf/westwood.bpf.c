// SPDX-License-Identifier: GPL-2.0
/*
 * TCP Westwood+ (Mascolo, Casetti, Gerla, Sanadidi, Wang, "TCP Westwood: bandwidth
 * estimation for enhanced transport over wireless links", MobiCom 2001; Grieco,
 * Mascolo, "Performance evaluation and comparison of Westwood+, New Reno and Vegas",
 * CCR 2004). The sender estimates the bandwidth from the ACK stream once per RTT
 * (at least 50 ms), smooths it with two 7/8 filters, and after a loss sets
 * ssthresh = BWE * RTTmin (the pipe size) instead of halving. Growth is Reno's.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, rtt_min_sample_ms, 50, 1, "shortest bandwidth sampling interval (ms)");
PARAM(__u32, filter_shift, 3, 1, "EWMA weight 1/2^shift for both filters (3 = 7/8 old)");

struct westwood {
	__u64 bw_ns_est;   /* first filter, bytes/s */
	__u64 bw_est;      /* second filter, bytes/s */
	__u64 rtt_win_sx;  /* start of the sampling interval, us */
	__u32 bk;          /* bytes ACKed in the interval */
	__u32 snd_una;     /* last snd_una seen */
	__u32 rtt;         /* latest RTT sample, us */
	__u32 rtt_min;     /* us */
	__u32 first_sample;
	__u32 loss_cwnd;
};
CA_PRIV_CHECK(struct westwood);

CC_PROG(void, ww_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct westwood *ca = ca_priv(sk);

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->rtt_min = 20 * USEC_PER_SEC; /* until measured */
	ca->rtt = ca->rtt_min;
	ca->snd_una = tp->snd_una;
	ca->rtt_win_sx = now_us(tp);
	ca->first_sample = 1;
}

/* Pipe size in segments at the estimated bandwidth and the minimum RTT. */
static __always_inline __u32 ww_bw_rttmin(struct tcp_sock *tp, struct westwood *ca)
{
	__u64 mss = tp->mss_cache ? tp->mss_cache : 1;

	return max_t(__u32, ca->bw_est * ca->rtt_min / USEC_PER_SEC / mss, 2);
}

static __always_inline void ww_filter(struct westwood *ca, __u64 delta_us)
{
	__u64 sample = (__u64)ca->bk * USEC_PER_SEC / delta_us;
	__u32 s = filter_shift & 15;

	if (ca->first_sample) {
		ca->bw_ns_est = sample;
		ca->bw_est = sample;
		ca->first_sample = 0;
	} else {
		ca->bw_ns_est = ca->bw_ns_est - (ca->bw_ns_est >> s) + (sample >> s);
		ca->bw_est = ca->bw_est - (ca->bw_est >> s) + (ca->bw_ns_est >> s);
	}
}

CC_PROG(void, ww_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct westwood *ca = ca_priv(sk);
	__u64 now = now_us(tp), delta;
	__u32 acked = tp->snd_una - ca->snd_una;

	/* Bytes newly ACKed cumulatively; duplicate ACKs add nothing here. */
	if ((__s32)acked > 0) {
		ca->bk += acked;
		ca->snd_una = tp->snd_una;
	}
	delta = now - ca->rtt_win_sx;
	/* Sample once per RTT, but no faster than every 50 ms. */
	if (delta > max_t(__u64, ca->rtt, (__u64)rtt_min_sample_ms * 1000)) {
		ww_filter(ca, delta);
		ca->bk = 0;
		ca->rtt_win_sx = now;
	}
}

CC_PROG(void, ww_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct westwood *ca = ca_priv(sk);

	if (sample->rtt_us > 0) {
		ca->rtt = sample->rtt_us;
		if ((__u32)sample->rtt_us < ca->rtt_min)
			ca->rtt_min = sample->rtt_us;
	}
}

CC_PROG(void, ww_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (cwnd_limited(tp))
		reno_grow(tp, acked);
}

CC_PROG(__u32, ww_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct westwood *ca = ca_priv(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	/* Without an estimate yet, be Reno. */
	if (ca->first_sample)
		return max_t(__u32, tp->snd_cwnd >> 1, 2);
	return ww_bw_rttmin(tp, ca);
}

CC_PROG(void, ww_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct westwood *ca = ca_priv(sk);

	if (ca->first_sample)
		return;
	if (ev == CA_EVENT_COMPLETE_CWR) {
		/* End of a reduction: cwnd = ssthresh = the pipe size. */
		__u32 w = ww_bw_rttmin(tp, ca);

		tp->snd_ssthresh = w;
		set_cwnd(tp, w);
	} else if (ev == CA_EVENT_LOSS) {
		/* RTO: restart slow start toward the pipe size. */
		tp->snd_ssthresh = ww_bw_rttmin(tp, ca);
		ca->rtt_min = 20 * USEC_PER_SEC; /* re-measure: the path may have changed */
	}
}

CC_PROG(__u32, ww_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct westwood *)ca_priv(sk))->loss_cwnd);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops westwood_ops = {
	.init = (void *)ww_init,
	.ssthresh = (void *)ww_ssthresh,
	.cong_avoid = (void *)ww_cong_avoid,
	.cwnd_event = (void *)ww_cwnd_event,
	.in_ack_event = (void *)ww_in_ack_event,
	.undo_cwnd = (void *)ww_undo_cwnd,
	.pkts_acked = (void *)ww_pkts_acked,
	.name = "cc_westwood",
};
