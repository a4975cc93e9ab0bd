// SPDX-License-Identifier: GPL-2.0
/*
 * DCTCP (RFC 8257; Alizadeh et al., SIGCOMM 2010) with the Linux defaults g = 1/16 and
 * alpha starting at 1. Once per window of data the sender updates
 *     alpha = (1 - g) alpha + g F,   F = fraction of delivered segments that were CE-marked,
 * and on ECN echo cuts cwnd by alpha/2. Real losses halve cwnd as Reno.
 * The receiver half (RFC 8257 3.2) sends an ACK at once whenever the CE state of
 * arriving data flips, so the sender sees exact marking runs.
 * Needs ECN: the ops carry TCP_CONG_NEEDS_ECN so the handshake negotiates it.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, shift_g, 4, 1, "EWMA gain g = 1/2^shift_g (4 = 1/16)");
PARAM(__u32, alpha_on_init, 1024, 1024, "initial alpha, /1024 (1024 = 1.0)");


struct dctcp {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 next_seq;        /* end of the current observation window */
	__u32 alpha;           /* /1024 */
	__u32 loss_cwnd;
	__u32 ce_state;        /* receiver: CE state of the last data segment */
	__u32 prior_rcv_nxt;
};
CA_PRIV_CHECK(struct dctcp);

static __always_inline void dctcp_reset(struct tcp_sock *tp, struct dctcp *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

CC_PROG(void, dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = ca_priv(sk);

	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->alpha = min_t(__u32, alpha_on_init, 1024);
	ca->loss_cwnd = 0;
	ca->ce_state = 0;
	dctcp_reset(tp, ca);
}

CC_PROG(__u32, dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = ca_priv(sk);
	__u32 cwnd = tp->snd_cwnd;

	/* ECN echo: cwnd * (1 - alpha/2). */
	ca->loss_cwnd = cwnd;
	return max_t(__u32, cwnd - (((__u64)cwnd * ca->alpha) >> 11), 2);
}

CC_PROG(void, dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = ca_priv(sk);

	/* One observation window = one window of data, ending at next_seq. */
	if ((__s32)(tp->snd_una - ca->next_seq) >= 0) {
		__u32 delivered = tp->delivered - ca->old_delivered;
		__u32 ce = tp->delivered_ce - ca->old_delivered_ce;
		__u32 g = shift_g & 15;
		__u32 alpha = ca->alpha;

		alpha -= alpha >> g;
		if (delivered > 0 && ce > 0) {
			/* + g * F, with F in 1/1024 units. */
			__u64 f = ((__u64)ce << 10) / delivered;

			alpha += (__u32)(f >> g);
		}
		ca->alpha = min_t(__u32, alpha, 1024);
		dctcp_reset(tp, ca);
	}
}

static __always_inline void dctcp_react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = ca_priv(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = max_t(__u32, tp->snd_cwnd >> 1, 2);
}

CC_PROG(void, dctcp_set_state, struct sock *sk, __u8 new_state)
{
	/* Entering fast recovery means a real loss: halve, whatever alpha says. */
	if (new_state == TCP_CA_Recovery &&
	    new_state != BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state))
		dctcp_react_to_loss(sk);
}

/* Receiver: on a CE flip, ACK what came before with the old ECE state at once. */
static __always_inline void dctcp_ece_update(struct sock *sk, __u32 ce)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = ca_priv(sk);

	if (ca->ce_state != ce) {
		if (inet_csk(sk)->icsk_ack.pending & ICSK_ACK_TIMER) {
			if (ca->ce_state)
				tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
			else
				tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
			bpf_tcp_send_ack(tp, ca->prior_rcv_nxt);
		}
		inet_csk(sk)->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = ce;
	if (ce)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

CC_PROG(void, dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	switch (ev) {
	case CA_EVENT_ECN_IS_CE:
		dctcp_ece_update(sk, 1);
		break;
	case CA_EVENT_ECN_NO_CE:
		dctcp_ece_update(sk, 0);
		break;
	case CA_EVENT_LOSS:
		dctcp_react_to_loss(sk);
		break;
	default:
		break;
	}
}

CC_PROG(void, dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (cwnd_limited(tp))
		reno_grow(tp, acked);
}

CC_PROG(__u32, dctcp_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct dctcp *)ca_priv(sk))->loss_cwnd);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops dctcp_ops = {
	.init = (void *)dctcp_init,
	.in_ack_event = (void *)dctcp_in_ack_event,
	.cwnd_event = (void *)dctcp_cwnd_event,
	.ssthresh = (void *)dctcp_ssthresh,
	.cong_avoid = (void *)dctcp_cong_avoid,
	.set_state = (void *)dctcp_set_state,
	.undo_cwnd = (void *)dctcp_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "cc_dctcp",
};
