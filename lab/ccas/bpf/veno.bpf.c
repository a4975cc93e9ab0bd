// SPDX-License-Identifier: GPL-2.0
/*
 * TCP Veno (Fu, Liew, "TCP Veno: TCP enhancement for transmission over wireless access
 * networks", IEEE JSAC 2003) with the Linux default beta = 3 segments. Vegas' backlog
 * estimate N = cwnd (RTT - BaseRTT) / RTT tells congestive from random loss:
 *   N < beta: loss is random, cut to 4/5; grow like Reno;
 *   N >= beta: loss is congestive, halve; grow one segment every other RTT.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, beta, 3, 1, "backlog (segments) separating random from congestive loss");
PARAM(__u32, random_loss_factor, 819, 1024, "cwnd kept after a random loss, /1024 (819 = 4/5)");

struct veno {
	__u32 enabled;
	__u32 beg_snd_nxt;
	__u32 cnt_rtt;
	__u32 min_rtt;
	__u32 base_rtt;
	__u32 diff;       /* last backlog estimate, segments */
	__u32 inc;        /* in congestive state: grow on every other RTT */
	__u32 loss_cwnd;
};
CA_PRIV_CHECK(struct veno);

static __always_inline void veno_enable(struct sock *sk, struct veno *ca)
{
	ca->enabled = 1;
	ca->beg_snd_nxt = tcp_sk(sk)->snd_nxt;
	ca->cnt_rtt = 0;
	ca->min_rtt = 0x7fffffff;
}

CC_PROG(void, veno_init, struct sock *sk)
{
	struct veno *ca = ca_priv(sk);

	ca->base_rtt = 0x7fffffff;
	ca->inc = 1;
	ca->diff = 0;
	ca->loss_cwnd = 0;
	veno_enable(sk, ca);
}

CC_PROG(void, veno_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct veno *ca = ca_priv(sk);
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

CC_PROG(void, veno_set_state, struct sock *sk, __u8 new_state)
{
	struct veno *ca = ca_priv(sk);

	if (new_state == TCP_CA_Open)
		veno_enable(sk, ca);
	else
		ca->enabled = 0;
}

CC_PROG(void, veno_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	if (ev == CA_EVENT_CWND_RESTART || ev == CA_EVENT_TX_START)
		veno_enable(sk, ca_priv(sk));
}

CC_PROG(void, veno_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct veno *ca = ca_priv(sk);

	if (!cwnd_limited(tp))
		return;
	if (!ca->enabled) {
		reno_grow(tp, acked);
		return;
	}
	/* Backlog estimate from this round's smallest RTT. */
	if (ca->cnt_rtt > 0 && ca->min_rtt != 0x7fffffff && ca->min_rtt >= ca->base_rtt)
		ca->diff = (__u64)tp->snd_cwnd * (ca->min_rtt - ca->base_rtt) / ca->min_rtt;
	if ((__s32)(ack - ca->beg_snd_nxt) > 0) {
		ca->beg_snd_nxt = tp->snd_nxt;
		ca->cnt_rtt = 0;
		ca->min_rtt = 0x7fffffff;
	}

	if (in_slow_start(tp)) {
		slow_start(tp, acked);
		return;
	}
	if (ca->diff < beta) {
		cwnd_add_per(tp, tp->snd_cwnd, acked);   /* Reno: +1 per RTT */
		return;
	}
	/* Congestive state: +1 every other RTT. */
	tp->snd_cwnd_cnt += acked;
	if (tp->snd_cwnd_cnt >= tp->snd_cwnd) {
		if (ca->inc) {
			set_cwnd(tp, tp->snd_cwnd + 1);
			ca->inc = 0;
		} else {
			ca->inc = 1;
		}
		tp->snd_cwnd_cnt = 0;
	}
}

CC_PROG(__u32, veno_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct veno *ca = ca_priv(sk);
	__u32 cwnd = tp->snd_cwnd;

	ca->loss_cwnd = cwnd;
	if (ca->diff < beta)
		return max_t(__u32, (__u64)cwnd * random_loss_factor / 1024, 2);
	return max_t(__u32, cwnd >> 1, 2);
}

CC_PROG(__u32, veno_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct veno *)ca_priv(sk))->loss_cwnd);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops veno_ops = {
	.init = (void *)veno_init,
	.ssthresh = (void *)veno_ssthresh,
	.cong_avoid = (void *)veno_cong_avoid,
	.set_state = (void *)veno_set_state,
	.cwnd_event = (void *)veno_cwnd_event,
	.undo_cwnd = (void *)veno_undo_cwnd,
	.pkts_acked = (void *)veno_pkts_acked,
	.name = "cc_veno",
};
