// SPDX-License-Identifier: GPL-2.0
/*
 * CUBIC (RFC 9438; Ha, Rhee, Xu 2008) with HyStart (Ha, Rhee 2011), using the Linux
 * default constants: beta 717/1024, C = 0.4, fast convergence and TCP friendliness on,
 * HyStart with ACK-train and delay detection from cwnd 16.
 *
 * A second CUBIC beside the kernel's, so the lab can check that the zoo's BPF
 * implementations produce the same fingerprints as the in-kernel ones.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, beta, 717, 1024, "multiplicative decrease factor, /1024 (717 = 0.7)");
PARAM(__u32, c, 400, 1000, "cubic scaling constant C, /1000 (400 = 0.4)");
PARAM(__u32, fast_convergence, 1, 1, "1: release bandwidth faster when W_max shrinks (RFC 9438 4.7)");
PARAM(__u32, tcp_friendliness, 1, 1, "1: never grow slower than the Reno-friendly estimate (RFC 9438 4.3)");
PARAM(__u32, initial_ssthresh, 0, 1, "initial ssthresh in segments (0 = stack default)");
PARAM(__u32, hystart, 1, 1, "1: HyStart slow-start exit");
PARAM(__u32, hystart_detect, 3, 1, "HyStart detectors bitmask: 1 ACK train, 2 delay increase");
PARAM(__u32, hystart_low_window, 16, 1, "HyStart only acts from this cwnd up (segments)");
PARAM(__u32, hystart_ack_delta_us, 2000, 1, "max spacing of ACKs counted as one train (us)");

#define HYSTART_ACK_TRAIN 1
#define HYSTART_DELAY 2
#define HYSTART_MIN_SAMPLES 8
#define HYSTART_DELAY_MIN_US 4000
#define HYSTART_DELAY_MAX_US 16000
/* Time is kept in 1/1024 s units so t^3 stays inside 64 bits for ~128 s epochs. */
#define CUBIC_TIME_SHIFT 10
#define CUBIC_MAX_OFFS (1U << 17)

struct cubic {
	__u32 cnt;           /* ACKed segments per one-segment cwnd increase */
	__u32 last_max_cwnd; /* W_max before the last reduction */
	__u32 origin_point;  /* W at the plateau of the current cubic curve */
	__u32 K;             /* time to reach origin_point, 1/1024 s */
	__u32 delay_min;     /* smallest RTT seen, us */
	__u32 ack_cnt;       /* segments ACKed this epoch, for the Reno estimate */
	__u32 tcp_cwnd;      /* Reno-friendly window estimate W_est */
	__u32 loss_cwnd;     /* cwnd at the last reduction, for undo */
	__u64 epoch_start;   /* us; 0 = no epoch running */
	__u64 last_ack_us;   /* for shifting the epoch over idle periods */
	/* HyStart */
	__u32 round_start;
	__u32 last_ack;
	__u32 end_seq;
	__u32 curr_rtt;
	__u8 found;
	__u8 sample_cnt;
};
CA_PRIV_CHECK(struct cubic);

static __always_inline void cubic_reset(struct cubic *ca)
{
	ca->cnt = 0;
	ca->last_max_cwnd = 0;
	ca->origin_point = 0;
	ca->K = 0;
	ca->delay_min = 0;
	ca->ack_cnt = 0;
	ca->tcp_cwnd = 0;
	ca->epoch_start = 0;
	ca->found = 0;
}

static __always_inline void hystart_new_round(struct sock *sk, struct cubic *ca)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 now = (__u32)now_us(tp);

	ca->round_start = now;
	ca->last_ack = now;
	ca->end_seq = tp->snd_nxt;
	ca->curr_rtt = ~0U;
	ca->sample_cnt = 0;
}

CC_PROG(void, cubic_init, struct sock *sk)
{
	struct cubic *ca = ca_priv(sk);

	cubic_reset(ca);
	ca->loss_cwnd = 0;
	ca->last_ack_us = 0;
	if (hystart)
		hystart_new_round(sk, ca);
	if (initial_ssthresh)
		tcp_sk(sk)->snd_ssthresh = initial_ssthresh;
}

/* Work out how many ACKed segments should buy one more segment of cwnd. */
static __always_inline void cubic_update(struct cubic *ca, struct tcp_sock *tp, __u32 acked)
{
	__u32 cwnd = tp->snd_cwnd, target, cnt;
	__u64 now = now_us(tp), t, offs, delta;

	ca->ack_cnt += acked;
	if (ca->epoch_start == 0) {
		/* A new epoch starts at the first ACK after a reduction. */
		ca->epoch_start = now ? now : 1;
		ca->ack_cnt = acked;
		ca->tcp_cwnd = cwnd;
		if (ca->last_max_cwnd <= cwnd) {
			ca->K = 0;
			ca->origin_point = cwnd;
		} else {
			/* K = cbrt((W_max - cwnd) / C), in 1/1024 s. */
			__u64 d = (__u64)(ca->last_max_cwnd - cwnd) << (3 * CUBIC_TIME_SHIFT);

			ca->K = icbrt64(d * 1000 / (c ? c : 1));
			ca->origin_point = ca->last_max_cwnd;
		}
	}

	/* Aim one RTT ahead: where the curve will be when this window is ACKed. */
	t = now - ca->epoch_start + ca->delay_min;
	t = (t << CUBIC_TIME_SHIFT) / USEC_PER_SEC;
	offs = t < ca->K ? ca->K - t : t - ca->K;
	if (offs > CUBIC_MAX_OFFS)
		offs = CUBIC_MAX_OFFS;
	delta = (c * offs * offs * offs) / (1000ULL << (3 * CUBIC_TIME_SHIFT));
	if (t < ca->K)
		target = delta < ca->origin_point ? ca->origin_point - (__u32)delta : 0;
	else
		target = ca->origin_point + (__u32)min_t(__u64, delta, 1U << 30);

	if (target > cwnd)
		cnt = cwnd / (target - cwnd);
	else
		cnt = 100 * cwnd; /* plateau: grow very slowly */

	/* Before the first loss the path is unknown: grow at least 5% per RTT. */
	if (ca->last_max_cwnd == 0 && cnt > 20)
		cnt = 20;

	if (tcp_friendliness) {
		/* W_est grows alpha = 3(1-b)/(1+b) segments per RTT: one per cwnd/alpha ACKs. */
		__u32 per = (__u64)cwnd * (1024 + beta) / (3 * (1024 - beta));
		__u32 n;

		if (per == 0)
			per = 1;
		n = ca->ack_cnt / per;
		ca->ack_cnt -= n * per;
		ca->tcp_cwnd += n;
		if (ca->tcp_cwnd > cwnd) {
			__u32 m = cwnd / (ca->tcp_cwnd - cwnd);

			if (cnt > m)
				cnt = m;
		}
	}
	/* Never more than 1.5x per RTT. */
	ca->cnt = cnt < 2 ? 2 : cnt;
}

CC_PROG(void, cubic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct cubic *ca = ca_priv(sk);

	ca->last_ack_us = now_us(tp);
	if (!cwnd_limited(tp))
		return;
	if (in_slow_start(tp)) {
		if (hystart && (__s32)(ack - ca->end_seq) > 0)
			hystart_new_round(sk, ca);
		acked = slow_start(tp, acked);
		if (!acked)
			return;
	}
	cubic_update(ca, tp, acked);
	cwnd_add_per(tp, ca->cnt, acked);
}

CC_PROG(__u32, cubic_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct cubic *ca = ca_priv(sk);
	__u32 cwnd = tp->snd_cwnd;

	ca->epoch_start = 0;
	/* Fast convergence: a flow whose W_max keeps shrinking yields to newcomers. */
	if (cwnd < ca->last_max_cwnd && fast_convergence)
		ca->last_max_cwnd = (__u64)cwnd * (1024 + beta) / 2048;
	else
		ca->last_max_cwnd = cwnd;
	ca->loss_cwnd = cwnd;
	return max_t(__u32, (__u64)cwnd * beta / 1024, 2);
}

CC_PROG(__u32, cubic_undo_cwnd, struct sock *sk)
{
	struct cubic *ca = ca_priv(sk);

	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ca->loss_cwnd);
}

CC_PROG(void, cubic_set_state, struct sock *sk, __u8 new_state)
{
	struct cubic *ca = ca_priv(sk);

	/* An RTO means the path is unknown again. */
	if (new_state == TCP_CA_Loss) {
		cubic_reset(ca);
		hystart_new_round(sk, ca);
	}
}

CC_PROG(void, cubic_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct cubic *ca = ca_priv(sk);

	/* After idle, shift the epoch so the curve does not jump by the idle time. */
	if (ev == CA_EVENT_TX_START && ca->epoch_start && ca->last_ack_us) {
		__u64 now = now_us(tcp_sk(sk));

		if (now > ca->last_ack_us) {
			ca->epoch_start += now - ca->last_ack_us;
			if (ca->epoch_start > now)
				ca->epoch_start = now;
		}
	}
}

static __always_inline void hystart_update(struct sock *sk, struct cubic *ca, __u32 rtt)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (ca->found)
		return;
	/* The ACK that ends a round opens the next one here, before its RTT sample is used, so
	 * that sample is the new round's first (as in the kernel's CUBIC). cong_avoid still
	 * starts rounds below hystart_low_window, which keeps them aligned with the window
	 * doublings. Without this HyStart left slow start one ACK later than the kernel's. */
	if ((__s32)(tp->snd_una - ca->end_seq) > 0)
		hystart_new_round(sk, ca);

	if (hystart_detect & HYSTART_ACK_TRAIN) {
		__u32 now = (__u32)now_us(tp);

		/* ACKs arriving back to back form a train; a train as long as half the
		 * minimum RTT means the pipe is full. */
		if (now - ca->last_ack <= hystart_ack_delta_us) {
			__u32 threshold = ca->delay_min;

			ca->last_ack = now;
			if (sk->sk_pacing_status == SK_PACING_NONE)
				threshold >>= 1;
			if (now - ca->round_start > threshold) {
				ca->found = 1;
				tp->snd_ssthresh = tp->snd_cwnd;
			}
		}
	}

	if (hystart_detect & HYSTART_DELAY) {
		/* Compare the round's minimum RTT over its first ACKs with the flow's. */
		if (ca->sample_cnt < HYSTART_MIN_SAMPLES) {
			if (rtt < ca->curr_rtt)
				ca->curr_rtt = rtt;
			ca->sample_cnt++;
		} else {
			__u32 eta = clamp_t(__u32, ca->delay_min >> 3, HYSTART_DELAY_MIN_US,
					    HYSTART_DELAY_MAX_US);

			if (ca->curr_rtt > ca->delay_min + eta) {
				ca->found = 1;
				tp->snd_ssthresh = tp->snd_cwnd;
			}
		}
	}
}

CC_PROG(void, cubic_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct cubic *ca = ca_priv(sk);
	__s32 rtt = sample->rtt_us;

	if (rtt < 0)
		return;
	if (rtt == 0)
		rtt = 1;
	if (ca->delay_min == 0 || ca->delay_min > (__u32)rtt)
		ca->delay_min = rtt;
	if (hystart && in_slow_start(tp) && tp->snd_cwnd >= hystart_low_window)
		hystart_update(sk, ca, rtt);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops cubic_ops = {
	.init = (void *)cubic_init,
	.ssthresh = (void *)cubic_ssthresh,
	.cong_avoid = (void *)cubic_cong_avoid,
	.set_state = (void *)cubic_set_state,
	.undo_cwnd = (void *)cubic_undo_cwnd,
	.cwnd_event = (void *)cubic_cwnd_event,
	.pkts_acked = (void *)cubic_pkts_acked,
	.name = "cc_cubic",
};
