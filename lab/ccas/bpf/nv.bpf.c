// SPDX-License-Identifier: GPL-2.0
/*
 * TCP-NV, "New Vegas" (Brakmo, "TCP-NV: An Update to TCP-Vegas", 2010, the design
 * merged in Linux 4.8) with the Linux default constants. NV compares cwnd with the
 * window the measured rate supports at the minimum RTT,
 *     max_win = in_flight * min_rtt / avg_rtt,
 * and treats cwnd > max_win + pad as congestion: after enough consistent samples it
 * cuts cwnd by 30% of the excess (at most once per RTT), slowing later growth; with
 * cwnd < max_win - pad_buffer it lets cwnd grow again. min_rtt is re-learnt every
 * reset period. On loss it keeps 80% of cwnd.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, pad, 10, 1, "segments allowed in the queue before NV calls it congestion");
PARAM(__u32, pad_buffer, 2, 1, "hysteresis below max_win before growth resumes (segments)");
PARAM(__u32, reset_period_ms, 5000, 1, "min RTT is re-learnt over this period (ms)");
PARAM(__u32, min_cwnd, 2, 1, "NV never cuts cwnd below this (segments)");
PARAM(__u32, cong_dec_mult, 38, 128, "fraction of the excess removed per decrease, /128 (38 = 0.3)");
PARAM(__u32, ssthresh_factor, 8, 8, "ssthresh = max_win * factor / 8 when slow start ends");
PARAM(__u32, rtt_factor, 128, 256, "weight of the new sample in avg_rtt, /256");
PARAM(__u32, loss_dec_factor, 819, 1024, "cwnd kept on loss, /1024 (819 = 0.8)");
PARAM(__u32, growth_rate_neg, 8, 1, "growth may slow to 1 segment per 2^n RTTs after congestion");
PARAM(__u32, dec_eval_min_calls, 60, 1, "samples showing congestion before a decrease");
PARAM(__u32, inc_eval_min_calls, 20, 1, "samples showing room before growth resumes");
PARAM(__u32, ssthresh_eval_min_calls, 30, 1, "samples showing congestion before leaving slow start");
PARAM(__u32, rtt_min_cnt, 2, 1, "RTTs to wait before NV starts judging");

struct nv {
	__u64 min_rtt_reset;  /* us: when min_rtt_new takes over */
	__u32 min_rtt;        /* us, current estimate */
	__u32 min_rtt_new;    /* us, being learnt */
	__u32 last_rtt;       /* us, averaged */
	__u32 rtt_start_seq;  /* round boundary */
	__u32 rtt_cnt;
	__u32 eval_cnt;       /* consecutive samples agreeing */
	__u32 last_dec_seq;   /* no second decrease before this is ACKed */
	__s32 growth_factor;  /* < 0: grow one segment per cwnd << -factor ACKs */
	__u32 allow_growth;
	__u32 loss_cwnd;
};
CA_PRIV_CHECK(struct nv);

CC_PROG(void, nv_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct nv *ca = ca_priv(sk);

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->min_rtt = 0x7fffffff;
	ca->min_rtt_new = 0x7fffffff;
	ca->min_rtt_reset = now_us(tp) + (__u64)reset_period_ms * 1000;
	ca->rtt_start_seq = tp->snd_una;
	ca->last_dec_seq = tp->snd_una;
	ca->allow_growth = 1;
}

CC_PROG(void, nv_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct nv *ca = ca_priv(sk);
	__u32 cnt;

	if (!cwnd_limited(tp) || !ca->allow_growth)
		return;
	if (in_slow_start(tp)) {
		slow_start(tp, acked);
		return;
	}
	if (ca->growth_factor < 0)
		cnt = tp->snd_cwnd << ((-ca->growth_factor) & 15);
	else
		cnt = max_t(__u32, 4, tp->snd_cwnd >> (ca->growth_factor & 15));
	cwnd_add_per(tp, cnt, acked);
}

CC_PROG(void, nv_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct nv *ca = ca_priv(sk);
	__u8 state = BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state);
	__u64 now = now_us(tp);
	__u32 avg, max_win, cwnd = tp->snd_cwnd;

	if (sample->rtt_us <= 0 || (state != TCP_CA_Open && state != TCP_CA_Disorder))
		return;

	/* Smooth the RTT a little; a single sample is noisy. */
	avg = ca->last_rtt ? ((__u64)sample->rtt_us * rtt_factor +
			      (__u64)ca->last_rtt * (256 - rtt_factor)) >> 8
			   : (__u32)sample->rtt_us;
	if (avg == 0)
		avg = 1;
	ca->last_rtt = avg;

	if (avg < ca->min_rtt)
		ca->min_rtt = avg;
	if (avg < ca->min_rtt_new)
		ca->min_rtt_new = avg;
	/* Re-learn the minimum periodically: routes and queues change. */
	if (now > ca->min_rtt_reset) {
		ca->min_rtt = ca->min_rtt_new;
		ca->min_rtt_new = 0x7fffffff;
		ca->min_rtt_reset = now + (__u64)reset_period_ms * 1000;
	}

	if ((__s32)(tp->snd_una - ca->rtt_start_seq) >= 0) {
		ca->rtt_start_seq = tp->snd_nxt;
		if (ca->rtt_cnt < 0xff)
			ca->rtt_cnt++;
	}
	if (ca->rtt_cnt < rtt_min_cnt)
		return;

	/* The window the current delivery rate supports at the minimum RTT. The kernel gives
	 * in_flight in bytes (mss * segments delivered since the sampled one was sent). */
	max_win = (__u64)sample->in_flight / (tp->mss_cache ? tp->mss_cache : 1) * ca->min_rtt / avg;

	if (cwnd > max_win + pad) {
		ca->allow_growth = 0;
		if (ca->eval_cnt < 0xff)
			ca->eval_cnt++;
		if (in_slow_start(tp)) {
			if (ca->eval_cnt < ssthresh_eval_min_calls)
				return;
			tp->snd_ssthresh = max_t(__u32, ((__u64)max_win * ssthresh_factor) >> 3, min_cwnd);
		} else if (ca->eval_cnt < dec_eval_min_calls) {
			return;
		}
		if ((__s32)(tp->snd_una - ca->last_dec_seq) < 0)
			return; /* one decrease per RTT */
		{
			__u32 dec = max_t(__u32, 2, ((cwnd - max_win) * cong_dec_mult) >> 7);

			cwnd = cwnd > dec + min_cwnd ? cwnd - dec : min_cwnd;
			set_cwnd(tp, cwnd);
			if (!in_slow_start(tp) || tp->snd_ssthresh > tp->snd_cwnd)
				tp->snd_ssthresh = tp->snd_cwnd;
		}
		if (ca->growth_factor > 0)
			ca->growth_factor = 0;
		else if (ca->growth_factor > -(__s32)growth_rate_neg)
			ca->growth_factor--;
		ca->last_dec_seq = tp->snd_nxt;
		ca->eval_cnt = 0;
	} else if (cwnd + pad_buffer <= max_win) {
		if (ca->eval_cnt < 0xff)
			ca->eval_cnt++;
		if (ca->eval_cnt < inc_eval_min_calls)
			return;
		ca->allow_growth = 1;
		ca->eval_cnt = 0;
	} else {
		ca->eval_cnt = 0;
	}
}

CC_PROG(__u32, nv_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct nv *ca = ca_priv(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	ca->allow_growth = 1;
	return max_t(__u32, ((__u64)tp->snd_cwnd * loss_dec_factor) >> 10, 2);
}

CC_PROG(__u32, nv_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct nv *)ca_priv(sk))->loss_cwnd);
}

CC_PROG(void, nv_set_state, struct sock *sk, __u8 new_state)
{
	struct nv *ca = ca_priv(sk);

	/* An RTO invalidates what NV learnt about the queue. */
	if (new_state == TCP_CA_Loss) {
		ca->allow_growth = 1;
		ca->growth_factor = 0;
		ca->eval_cnt = 0;
		ca->rtt_cnt = 0;
	}
}

SEC(".struct_ops.link")
struct tcp_congestion_ops nv_ops = {
	.init = (void *)nv_init,
	.ssthresh = (void *)nv_ssthresh,
	.cong_avoid = (void *)nv_cong_avoid,
	.set_state = (void *)nv_set_state,
	.undo_cwnd = (void *)nv_undo_cwnd,
	.pkts_acked = (void *)nv_pkts_acked,
	.name = "cc_nv",
};
