// SPDX-License-Identifier: GPL-2.0
/*
 * CAIA Delay-Gradient, CDG (Hayes, Armitage, "Revisiting TCP congestion control using
 * delay gradients", IFIP Networking 2011) with the Linux default constants.
 *
 * Once per RTT CDG takes the RTT's minimum and maximum, and their changes from the
 * previous RTT (the gradients g_min, g_max), averaged over the last `window` RTTs.
 * A rising gradient g triggers a backoff (cwnd *= 0.7) with probability
 *     P = 1 - exp(-g / G),  G = 65536 / backoff_factor us,
 * so flows back off before the queue overflows. A "shadow window" keeps growing as
 * Reno would have, so a CDG flow competing with loss-based flows is not starved: on
 * loss, cwnd = max(cwnd, shadow) / 2. Slow start ends on HyStart-like signals.
 * Not implemented: the ineffective-backoff detector (use_ineff) of the Linux module.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, window, 8, 1, "RTTs in the gradient moving average (1..16)");
PARAM(__u32, backoff_beta, 717, 1024, "cwnd kept on a delay backoff, /1024 (717 = 0.7)");
PARAM(__u32, backoff_factor, 42, 1, "P(backoff) = 1 - exp(-g * factor / 65536), g in us");
PARAM(__u32, use_shadow, 1, 1, "1: keep a Reno shadow window to compete with loss-based flows");
PARAM(__u32, hystart_detect, 3, 1, "slow-start exit: 1 ACK train, 2 delay increase");

#define CDG_MAX_WINDOW 16
#define HYSTART_MIN_SAMPLES 8

struct cdg {
	__s32 gmin[CDG_MAX_WINDOW];
	__s32 gmax[CDG_MAX_WINDOW];
	__s64 gsum_min;
	__s64 gsum_max;
	__u32 tail;         /* ring position */
	__u32 filled;       /* entries in the ring */
	__u32 rtt_seq;      /* round boundary */
	__u32 rtt_min;      /* this round, us */
	__u32 rtt_max;
	__u32 prev_min;     /* previous round */
	__u32 prev_max;
	__u32 shadow_wnd;
	__u32 loss_cwnd;
	__u32 backed_off;   /* a backoff happened this round */
	/* slow-start exit */
	__u32 delay_min;
	__u32 round_start;
	__u32 last_ack;
	__u32 sample_cnt;
	__u32 found;
};

/* Too big for icsk_ca_priv: keep it in socket-local storage. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct cdg);
} cdg_state SEC(".maps");

static __always_inline struct cdg *cdg_get(struct sock *sk)
{
	return bpf_sk_storage_get(&cdg_state, sk, 0, 0);
}

static __always_inline void cdg_new_round(struct tcp_sock *tp, struct cdg *ca)
{
	ca->rtt_seq = tp->snd_nxt;
	ca->rtt_min = 0;
	ca->rtt_max = 0;
	ca->backed_off = 0;
	ca->round_start = (__u32)now_us(tp);
	ca->last_ack = ca->round_start;
	ca->sample_cnt = 0;
}

CC_PROG(void, cdg_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct cdg *ca = bpf_sk_storage_get(&cdg_state, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (!ca)
		return;
	__builtin_memset(ca, 0, sizeof(*ca));
	cdg_new_round(tp, ca);
}

CC_PROG(void, cdg_release, struct sock *sk)
{
	bpf_sk_storage_delete(&cdg_state, sk);
}

/* exp(-x / 65536) * 2^32, via 2^-y with a quadratic for the fractional part. */
static __always_inline __u64 nexp32(__u64 x)
{
	__u64 y = x * 94548 >> 16;   /* x * log2(e) */
	__u64 n = y >> 16, f = y & 0xffff, frac;

	if (n >= 32)
		return 0;
	/* 2^-t ~ 1 - 0.6565 t + 0.1565 t^2 on [0, 1) (exact at both ends). */
	frac = 65536 - ((f * 43025) >> 16) + ((((f * f) >> 16) * 10257) >> 16);
	return (frac << 16) >> n;
}

static __always_inline void cdg_hystart(struct tcp_sock *tp, struct cdg *ca, __u32 rtt)
{
	__u32 now = (__u32)now_us(tp);

	if (ca->found || tp->snd_cwnd < 16)
		return;
	if ((hystart_detect & 1) && now - ca->last_ack <= 3000) {
		ca->last_ack = now;
		if (now - ca->round_start > (ca->delay_min >> 1))
			ca->found = 1;
	}
	if (hystart_detect & 2) {
		if (ca->sample_cnt < HYSTART_MIN_SAMPLES) {
			ca->sample_cnt++;
		} else if (ca->rtt_min > ca->delay_min +
			   clamp_t(__u32, ca->delay_min >> 3, 4000, 16000)) {
			ca->found = 1;
		}
	}
	if (ca->found)
		tp->snd_ssthresh = tp->snd_cwnd;
}

CC_PROG(void, cdg_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct cdg *ca = cdg_get(sk);
	__u32 rtt;

	if (!ca || sample->rtt_us <= 0)
		return;
	rtt = sample->rtt_us;
	if (!ca->rtt_min || rtt < ca->rtt_min)
		ca->rtt_min = rtt;
	if (rtt > ca->rtt_max)
		ca->rtt_max = rtt;
	if (!ca->delay_min || rtt < ca->delay_min)
		ca->delay_min = rtt;
	if (in_slow_start(tp) && hystart_detect)
		cdg_hystart(tp, ca, rtt);
}

/* Close a round: push its gradients into the moving average. */
static __always_inline void cdg_round(struct tcp_sock *tp, struct cdg *ca)
{
	__u32 w = clamp_t(__u32, window, 1, CDG_MAX_WINDOW);
	__u32 i = ca->tail % CDG_MAX_WINDOW;

	if (ca->prev_min && ca->rtt_min) {
		__s32 gmin = (__s32)(ca->rtt_min - ca->prev_min);
		__s32 gmax = (__s32)(ca->rtt_max - ca->prev_max);

		if (ca->filled >= w) {
			ca->gsum_min -= ca->gmin[i];
			ca->gsum_max -= ca->gmax[i];
		} else {
			ca->filled++;
		}
		ca->gmin[i] = gmin;
		ca->gmax[i] = gmax;
		ca->gsum_min += gmin;
		ca->gsum_max += gmax;
		ca->tail = (i + 1) % w;
	}
	if (ca->rtt_min) {
		ca->prev_min = ca->rtt_min;
		ca->prev_max = ca->rtt_max;
	}
	cdg_new_round(tp, ca);
}

CC_PROG(void, cdg_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct cdg *ca = cdg_get(sk);
	__u32 prior;

	if (!ca)
		return;
	if ((__s32)(ack - ca->rtt_seq) > 0) {
		cdg_round(tp, ca);
		/* Gradient of the queue: prefer g_min (it ignores transient spikes). */
		if (ca->filled && !ca->backed_off) {
			__s64 gmin = ca->gsum_min, gmax = ca->gsum_max, g;

			g = gmin > 0 ? gmin : gmax;
			if (g > 0) {
				__u64 avg = (__u64)g / ca->filled;
				__u64 keep = nexp32(avg * backoff_factor);

				if ((__u64)bpf_get_prandom_u32() > keep) {
					/* Delay-based backoff: the shadow keeps the window we had. */
					if (use_shadow)
						ca->shadow_wnd = max_t(__u32, ca->shadow_wnd, tp->snd_cwnd);
					set_cwnd(tp, (__u64)tp->snd_cwnd * backoff_beta >> 10);
					tp->snd_ssthresh = tp->snd_cwnd;
					ca->backed_off = 1;
					return;
				}
			}
		}
	}
	if (!cwnd_limited(tp))
		return;
	prior = tp->snd_cwnd;
	reno_grow(tp, acked);
	/* The shadow grows as Reno's window would. */
	if (ca->shadow_wnd && tp->snd_cwnd > prior)
		ca->shadow_wnd += tp->snd_cwnd - prior;
}

CC_PROG(__u32, cdg_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct cdg *ca = cdg_get(sk);
	__u32 cwnd = tp->snd_cwnd;

	if (!ca)
		return max_t(__u32, cwnd >> 1, 2);
	ca->loss_cwnd = cwnd;
	if (use_shadow) {
		ca->shadow_wnd = max_t(__u32, ca->shadow_wnd, cwnd) >> 1;
		return max_t(__u32, ca->shadow_wnd, 2);
	}
	return max_t(__u32, cwnd >> 1, 2);
}

CC_PROG(__u32, cdg_undo_cwnd, struct sock *sk)
{
	struct cdg *ca = cdg_get(sk);

	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ca ? ca->loss_cwnd : 0);
}

CC_PROG(void, cdg_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct cdg *ca = cdg_get(sk);

	if (!ca)
		return;
	/* After idle, old gradients describe another queue. */
	if (ev == CA_EVENT_CWND_RESTART) {
		__builtin_memset(ca, 0, sizeof(*ca));
		cdg_new_round(tcp_sk(sk), ca);
	}
}

SEC(".struct_ops.link")
struct tcp_congestion_ops cdg_ops = {
	.init = (void *)cdg_init,
	.release = (void *)cdg_release,
	.ssthresh = (void *)cdg_ssthresh,
	.cong_avoid = (void *)cdg_cong_avoid,
	.cwnd_event = (void *)cdg_cwnd_event,
	.undo_cwnd = (void *)cdg_undo_cwnd,
	.pkts_acked = (void *)cdg_pkts_acked,
	.name = "cc_cdg",
};
