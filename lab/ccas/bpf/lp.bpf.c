// SPDX-License-Identifier: GPL-2.0
/*
 * TCP-LP, low priority (Kuzmanovic, Knightly, "TCP-LP: A Distributed Algorithm for
 * Low Priority Data Transfer", INFOCOM 2003). It yields to any other traffic by
 * reacting to *early* congestion: the one-way delay, taken from TCP timestamps
 * (peer's TSval minus our clock when the segment left), smoothed 7/8, crossing
 *     d_min + delta (d_max - d_min),  delta = 15%,
 * halves cwnd and starts an inference period of 3 RTTs; a second indication inside it
 * drops cwnd to the minimum. No growth during the inference period; Reno otherwise.
 * Without timestamps it is plain Reno. Assumes the peer's timestamp clock ticks in ms
 * (Linux and most servers); the Linux module also estimates other rates.
 *
 * Measurement details that keep a lone LP flow from taking its own noise for cross
 * traffic (each explained where it is done): the delay is that of the newest segment
 * an ACK covers (TSecr's is the oldest, which includes the receiver's delayed-ACK
 * wait); samples only from ACKs in the Open state; d_max learnt once the first slow
 * start has ended; an indication needs the smoothed delay, the sample itself and the
 * lowest delay of the last RTT all over the threshold, and after a cut, a sample of a
 * segment sent after it. A halving sets ssthresh to the halved window; the drop to
 * the floor leaves it, so LP slow-starts back to its last operating point.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

PARAM(__u32, delta_pct, 15, 100, "early-congestion threshold within [d_min, d_max], /100");
PARAM(__u32, inference_rtts, 3, 1, "inference period after a reduction, in RTTs");
PARAM(__u32, min_range_ms, 3, 1, "ignore indications until d_max - d_min spans this many ms");
PARAM(__u32, tolerance_ms, 1, 1, "smoothed delay must exceed the threshold by this much (ms)");
PARAM(__u32, min_cwnd, 2, 1, "cwnd after a repeated indication (paper: 1; see below)");
PARAM(__u32, newest_segment_ref, 1, 1, "1: one-way delay of the newest segment ACKed; 0: of the one TSecr echoes");

#define LP_NO_WINDOW (-0x7fffffff - 1)

struct lp {
	__s64 sowd8;      /* smoothed one-way delay (+ clock offset), 1/8 ms */
	__s32 owd_min;    /* ms (+ offset) */
	__s32 owd_max;
	__u64 last_drop;  /* us of the last early-congestion reduction; 0 = none */
	__u32 have_owd;
	__u32 left_ss;    /* the first slow start is over: d_max is being learnt */
	__u64 win_start;  /* us: start of the current one-RTT window of delay samples */
	__s32 win_min;    /* lowest one-way delay in the current window */
	__s32 prev_win_min; /* ... in the last complete one (INT_MIN: none since a cut) */
	__u32 loss_cwnd;
};
CA_PRIV_CHECK(struct lp);

CC_PROG(void, lp_init, struct sock *sk)
{
	struct lp *ca = ca_priv(sk);

	__builtin_memset(ca, 0, sizeof(*ca));
}

static __always_inline bool lp_in_inference(struct tcp_sock *tp, struct lp *ca)
{
	__u64 rtt = tp->srtt_us >> 3;

	return ca->last_drop && now_us(tp) - ca->last_drop < inference_rtts * rtt;
}

CC_PROG(void, lp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);

	/* Stay put while inferring whether the last indication was real. */
	if (lp_in_inference(tp, ca_priv(sk)))
		return;
	if (cwnd_limited(tp))
		reno_grow(tp, acked);
}

/*
 * Our timestamp clock (ms) when the newest segment this ACK covers was sent. TSecr
 * echoes the *oldest* unacknowledged segment's TSval (RFC 7323 with delayed ACKs), so
 * TSval - TSecr also counts the time the receiver held that segment waiting for a second
 * one: at the small windows LP runs at, a delayed-ACK wait of up to 40 ms that LP took
 * for queueing and answered by shrinking further. The ACK's RTT sample belongs to the
 * newest segment (the one that triggered the ACK), so its send time is now - rtt, in
 * the clock TSval/TSecr use (tcp_mstamp in ms + the connection's tsoffset).
 */
static __always_inline __u32 lp_sent_ts(const struct tcp_sock *tp, const struct ack_sample *sample)
{
	if (!newest_segment_ref || BPF_CORE_READ_BITFIELD(tp, tcp_usec_ts))
		return tp->rx_opt.rcv_tsecr;
	return (__u32)((now_us(tp) - (__u64)sample->rtt_us) / USEC_PER_MSEC) + tp->tsoffset;
}

CC_PROG(void, lp_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct lp *ca = ca_priv(sk);
	__s32 owd;
	__s64 thr8;
	__u64 now = now_us(tp);

	/* No echoed timestamp: timestamps are off, stay Reno. */
	if (!tp->rx_opt.rcv_tsecr)
		return;
	/* Delay samples only from ACKs in the Open state with an RTT sample (no
	 * retransmission acked): in loss recovery the receiver echoes the TSval of the last
	 * in-order segment, sent before the loss, and that "delay" (hundreds of ms) would
	 * become d_max, putting the threshold above any real queue. */
	if (sample->rtt_us <= 0 || BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state) != TCP_CA_Open)
		return;
	owd = (__s32)(tp->rx_opt.rcv_tsval - lp_sent_ts(tp, sample));
	if (!ca->have_owd) {
		ca->owd_min = owd;
		ca->owd_max = owd;
		ca->sowd8 = (__s64)owd << 3;
		ca->have_owd = 1;
		ca->win_start = now;
		ca->win_min = owd;
		ca->prev_win_min = LP_NO_WINDOW;
		return;
	}
	/* One-RTT windows of the raw delay: their minimum is the standing queue; host and
	 * emulator jitter, and the queue of a single burst, only lift some samples. */
	if (now - ca->win_start >= (tp->srtt_us >> 3)) {
		ca->prev_win_min = ca->win_min;
		ca->win_min = owd;
		ca->win_start = now;
	} else if (owd < ca->win_min) {
		ca->win_min = owd;
	}
	if (owd < ca->owd_min)
		ca->owd_min = owd;
	/* d_max stands for the path's buffer. The first slow start sends line-rate bursts
	 * (a 10-segment initial window alone queues 12 ms at 10 Mbit/s) that say nothing
	 * about it; learnt from them, the range is a few ms and 15% of it lies within the
	 * timestamp tick, so LP takes its own two-segment flight for congestion and never
	 * leaves the floor. So d_max is learnt once slow start has ended (by a loss, or by
	 * ssthresh), and until then the range is empty and no indication is taken. */
	if (!in_slow_start(tp))
		ca->left_ss = 1;
	if (!ca->left_ss)
		ca->owd_max = ca->owd_min;
	else if (owd > ca->owd_max)
		ca->owd_max = owd;
	ca->sowd8 += owd - (ca->sowd8 >> 3);

	thr8 = ((__s64)ca->owd_min << 3) +
	       (__s64)((((__u64)(__u32)(ca->owd_max - ca->owd_min) << 3) * delta_pct) / 100);
	/* Timestamps tick in ms: a range of a few ticks, or a delay within a tick of
	 * the threshold, is quantisation noise rather than a queue. */
	if ((__u32)(ca->owd_max - ca->owd_min) < min_range_ms ||
	    ca->sowd8 <= thr8 + ((__s64)tolerance_ms << 3))
		return;

	/* Early congestion indication. After a reduction, only the response to the reduced
	 * window counts (the paper's inference phase): the ACKed segment must have been
	 * sent after the last reduction, and its own delay must be over the threshold too,
	 * since the smoothed delay still carries the queue the reduction is draining (it
	 * decays by 1/8 per ACK, slowly at a small window). */
	if (ca->last_drop && now - (__u64)sample->rtt_us < ca->last_drop)
		return;
	if (((__s64)owd << 3) <= thr8 + ((__s64)tolerance_ms << 3) ||
	    ((__s64)ca->prev_win_min * 8) <= thr8 + ((__s64)tolerance_ms << 3))
		return;
	/* The paper drops to one segment on a repeated indication; two are kept here:
	 * a lone segment waits out the receiver's delayed-ACK timer, which inflates the
	 * very one-way delay LP measures and would pin it at the floor. */
	/* A halving records the operating point in ssthresh (a loss-free Reno window);
	 * the drop to the floor does not (Linux's tcp_lp touches ssthresh for neither):
	 * once the inference period has passed without a new indication, LP climbs back
	 * by slow start to where it halved, then on by congestion avoidance, rather than
	 * one segment per RTT from the floor or by slow start to an old loss's ssthresh. */
	if (lp_in_inference(tp, ca)) {
		tp->snd_cwnd = min_cwnd;
	} else {
		tp->snd_cwnd = max_t(__u32, tp->snd_cwnd >> 1, min_cwnd);
		tp->snd_ssthresh = max_t(__u32, tp->snd_cwnd, 2);
	}
	ca->last_drop = now ? now : 1;
	/* The next indication needs a whole window of the response to this cut. */
	ca->prev_win_min = LP_NO_WINDOW;
	ca->win_min = owd;
	ca->win_start = now;
}

CC_PROG(__u32, lp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);

	((struct lp *)ca_priv(sk))->loss_cwnd = tp->snd_cwnd;
	return max_t(__u32, tp->snd_cwnd >> 1, 2);
}

CC_PROG(__u32, lp_undo_cwnd, struct sock *sk)
{
	return max_t(__u32, tcp_sk(sk)->snd_cwnd, ((struct lp *)ca_priv(sk))->loss_cwnd);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops lp_ops = {
	.init = (void *)lp_init,
	.ssthresh = (void *)lp_ssthresh,
	.cong_avoid = (void *)lp_cong_avoid,
	.undo_cwnd = (void *)lp_undo_cwnd,
	.pkts_acked = (void *)lp_pkts_acked,
	.name = "cc_lp",
};
