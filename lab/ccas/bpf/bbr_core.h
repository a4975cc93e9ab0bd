/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The BBR engine shared by bbr2.bpf.c (BBRv2) and bbr3.bpf.c (BBRv3). Each of those
 * declares the PARAM()s (its version's default constants) and defines BBR_VERSION
 * before including this file, then declares its struct_ops. What differs between
 * the versions beyond constants is under `#if BBR_VERSION == 2` (see bbr2.bpf.c).
 */
#ifndef BBR_CORE_H
#define BBR_CORE_H

#if !defined(BBR_VERSION) || (BBR_VERSION != 2 && BBR_VERSION != 3)
#error "define BBR_VERSION (2 or 3) before including bbr_core.h"
#endif

#define BBR_UNIT 256
#define BW_SCALE 24 /* bw is segments per us << 24 */
#define INF32 0xffffffffU

enum bbr_ca_mode { STARTUP, DRAIN, PROBE_BW, PROBE_RTT };
enum bbr_ca_phase { PH_DOWN, PH_CRUISE, PH_REFILL, PH_UP };

struct bbr_ca {
	/* bandwidth model, segments/us << BW_SCALE */
	__u64 max_bw[2];        /* per ProbeBW cycle: [0] current, [1] previous */
	__u64 bw_latest;        /* max delivery rate this loss round */
	__u64 bw_lo;            /* lower bound from loss; ~0 = none */
	__u64 full_bw;          /* Startup plateau detector */
	/* inflight model, segments */
	__u32 inflight_latest;
	__u32 inflight_lo;
	__u32 inflight_hi;
	/* RTT model, us */
	__u32 min_rtt_us;
	__u32 probe_rtt_min_us;
	__u64 min_rtt_stamp;
	__u64 probe_rtt_min_stamp;
	/* rounds */
	__u32 next_rtt_delivered;
	__u32 round_count;
	__u32 rounds_since_probe;
	__u32 loss_round_delivered;
	/* state */
	__u32 mode;
	__u32 phase;
	__u32 pacing_gain;
	__u32 cwnd_gain;
	__u32 full_bw_cnt;
	__u32 full_bw_reached;
	__u32 full_bw_now;      /* bw stopped growing (used in ProbeBW_UP) */
	__u32 loss_in_round;
	__u32 loss_events_in_round;
	__u32 round_start;
	__u32 loss_round_start;
	__u32 prior_cwnd;
	__u32 idle_restart;
	__u32 packet_conservation;
	__u32 prev_ca_state;
	/* ProbeRTT */
	__u64 probe_rtt_done_stamp;
	__u32 probe_rtt_round_done;
	__u32 probe_rtt_expired;
	/* ProbeBW */
	__u64 cycle_stamp;
	__u32 bw_probe_wait_us;
	__u32 bw_probe_samples;
	__u32 probe_up_rounds;
	__u32 probe_up_acks;
	__u32 probe_up_cnt;
	__u32 prev_probe_too_high; /* v2: the last UP ended in too much loss */
	/* v2 Startup loss exit: this loss round's totals */
	__u32 round_lost;
	__u32 round_delivered;
	/* v2: the most in flight in this and the previous round, standing in for the
	 * inflight at which lost packets were sent (rate_sample.tx_in_flight) */
	__u32 inflight_max_cur;
	__u32 inflight_max_prev;
	/* ACK aggregation */
	__u64 ack_epoch_mstamp;
	__u32 ack_epoch_acked;
	__u32 extra_acked[2];
	__u32 extra_acked_win_rtts_cnt;
	__u32 extra_acked_idx;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct bbr_ca);
} bbr_state SEC(".maps");

static __always_inline struct bbr_ca *bbr_get(struct sock *sk)
{
	return bpf_sk_storage_get(&bbr_state, sk, 0, 0);
}

static __always_inline __u64 max_bw(const struct bbr_ca *b)
{
	return max_t(__u64, b->max_bw[0], b->max_bw[1]);
}

/* The bw the model uses: the max filter, capped by the loss-derived lower bound. */
static __always_inline __u64 model_bw(const struct bbr_ca *b)
{
	return min_t(__u64, max_bw(b), b->bw_lo);
}

/* BDP in segments at `bw`, times gain/256. */
static __always_inline __u32 bdp(const struct bbr_ca *b, __u64 bw, __u32 gain)
{
	__u64 w;

	if (b->min_rtt_us == INF32)
		return 10; /* no RTT yet: the initial window */
	w = (bw * b->min_rtt_us) >> BW_SCALE;
	return (__u32)min_t(__u64, (w * gain + BBR_UNIT - 1) / BBR_UNIT, INF32 >> 1);
}

/* Room for TSO bursts and delayed ACKs on top of the BDP. */
static __always_inline __u32 quantization_budget(const struct bbr_ca *b, __u32 inflight)
{
	inflight += 3 * 2; /* three send quanta of ~2 segments */
	if (b->mode == PROBE_BW && b->phase == PH_UP)
		inflight += 2;
	return inflight;
}

static __always_inline __u32 target_inflight(const struct bbr_ca *b, __u32 cwnd)
{
	return min_t(__u32, bdp(b, model_bw(b), BBR_UNIT), cwnd);
}

static __always_inline __u32 inflight_with_headroom(const struct bbr_ca *b)
{
	__u32 headroom;

	if (b->inflight_hi == INF32)
		return INF32;
	headroom = max_t(__u32, 1, (__u64)b->inflight_hi * headroom_pct / 100);
	return max_t(__u32, b->inflight_hi > headroom ? b->inflight_hi - headroom : 0, min_pipe_cwnd);
}

static __always_inline __u32 extra_acked(const struct bbr_ca *b)
{
	return max_t(__u32, b->extra_acked[0], b->extra_acked[1]);
}

static __always_inline void set_pacing_rate(struct sock *sk, struct bbr_ca *b, __u64 bw, __u32 gain)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 rate;

	/* bytes/s = bw * mss * 1e6 >> BW_SCALE, times gain and (1 - margin). */
	rate = bw * tp->mss_cache;
	rate = (rate * gain) / BBR_UNIT;
	rate = rate * USEC_PER_SEC;
	rate >>= BW_SCALE;
	rate = rate * (100 - pacing_margin_pct) / 100;
	if (rate == 0)
		return;
	if (rate > sk->sk_max_pacing_rate)
		rate = sk->sk_max_pacing_rate;
	/* In Startup the rate only ever goes up: early samples underestimate. */
	if (b->full_bw_reached || rate > sk->sk_pacing_rate)
		sk->sk_pacing_rate = rate;
}

static __always_inline void init_pacing_rate(struct sock *sk, struct bbr_ca *b)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 rtt = tp->srtt_us ? tp->srtt_us >> 3 : 1000;
	__u64 bw = ((__u64)tp->snd_cwnd << BW_SCALE) / (rtt ? rtt : 1);

	sk->sk_pacing_rate = 0;
	set_pacing_rate(sk, b, bw, startup_pacing_gain);
}

static __always_inline void reset_lower_bounds(struct bbr_ca *b)
{
	b->bw_lo = ~0ULL;
	b->inflight_lo = INF32;
}

static __always_inline void reset_full_bw(struct bbr_ca *b)
{
	b->full_bw = 0;
	b->full_bw_cnt = 0;
	b->full_bw_now = 0;
}

static __always_inline void enter_startup(struct bbr_ca *b)
{
	b->mode = STARTUP;
	b->pacing_gain = startup_pacing_gain;
	b->cwnd_gain = startup_cwnd_gain;
}

CC_PROG(void, bbr_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr_ca *b = bpf_sk_storage_get(&bbr_state, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	__u64 now = now_us(tp);

	if (!b)
		return;
	__builtin_memset(b, 0, sizeof(*b));
	b->min_rtt_us = INF32;
	b->probe_rtt_min_us = INF32;
	b->min_rtt_stamp = now;
	b->probe_rtt_min_stamp = now;
	b->inflight_hi = INF32;
	reset_lower_bounds(b);
	b->next_rtt_delivered = tp->delivered;
	b->loss_round_delivered = tp->delivered;
	b->prior_cwnd = 0;
	b->prev_ca_state = TCP_CA_Open;
	b->ack_epoch_mstamp = tp->tcp_mstamp;
	enter_startup(b);
	tp->snd_ssthresh = TCP_INFINITE_SSTHRESH;
	init_pacing_rate(sk, b);
	/* BBR needs pacing; without an fq qdisc TCP paces internally when asked. */
	if (sk->sk_pacing_status == SK_PACING_NONE)
		sk->sk_pacing_status = SK_PACING_NEEDED;
}

CC_PROG(void, bbr_release, struct sock *sk)
{
	bpf_sk_storage_delete(&bbr_state, sk);
}

/* ---- ProbeBW phases ---------------------------------------------------------------- */

static __always_inline void start_probe_down(struct tcp_sock *tp, struct bbr_ca *b)
{
	b->phase = PH_DOWN;
	b->pacing_gain = probe_down_pacing_gain;
	b->cwnd_gain = cwnd_gain;
	b->rounds_since_probe = 0;
#if BBR_VERSION == 2
	/* v2 starts the Reno-coexistence round count at random too (0..rand_rounds-1). */
	if (bw_probe_rand_rounds)
		b->rounds_since_probe = bpf_get_prandom_u32() % bw_probe_rand_rounds;
#endif
	b->bw_probe_samples = 0;
	reset_full_bw(b);
#if BBR_VERSION == 2
	/* Losses of the probe are the probe's (inflight_hi): DOWN adapts the lower bounds
	 * only to what it sees itself. */
	b->loss_in_round = 0;
	b->bw_latest = 0;
	b->inflight_latest = 0;
#endif
	/* Probe again in 2-3 s: late enough to coexist with Reno/CUBIC. */
	b->bw_probe_wait_us = bw_probe_base_ms * 1000 +
			      (bw_probe_rand_ms ? bpf_get_prandom_u32() % (bw_probe_rand_ms * 1000) : 0);
	b->cycle_stamp = now_us(tp);
	/* A new cycle: the older half of the max-bw filter ages out. */
	b->max_bw[1] = b->max_bw[0];
	b->max_bw[0] = 0;
}

static __always_inline void start_probe_cruise(struct bbr_ca *b)
{
	b->phase = PH_CRUISE;
	b->pacing_gain = cruise_pacing_gain;
	b->cwnd_gain = cwnd_gain;
}

static __always_inline void start_probe_refill(struct tcp_sock *tp, struct bbr_ca *b)
{
	reset_lower_bounds(b);
	b->probe_up_rounds = 0;
	b->probe_up_acks = 0;
	b->phase = PH_REFILL;
	b->pacing_gain = cruise_pacing_gain;
	b->cwnd_gain = cwnd_gain;
	/* The refill round ends when what we send now is ACKed. */
	b->next_rtt_delivered = tp->delivered;
}

static __always_inline void raise_inflight_hi_slope(struct tcp_sock *tp, struct bbr_ca *b)
{
	__u32 growth = 1U << min_t(__u32, b->probe_up_rounds, 30);

	b->probe_up_rounds = min_t(__u32, b->probe_up_rounds + 1, 30);
	b->probe_up_cnt = max_t(__u32, tp->snd_cwnd / growth, 1);
}

static __always_inline void start_probe_up(struct tcp_sock *tp, struct bbr_ca *b)
{
	b->phase = PH_UP;
	b->pacing_gain = probe_up_pacing_gain;
	b->cwnd_gain = probe_up_cwnd_gain;
	b->bw_probe_samples = 1;
	b->cycle_stamp = now_us(tp);
	reset_full_bw(b);
	raise_inflight_hi_slope(tp, b);
}

/* In UP, while cwnd-limited at inflight_hi, raise it: 1, 2, 4, ... segments per round. */
static __always_inline void probe_inflight_hi_upward(struct tcp_sock *tp, struct bbr_ca *b,
						     __u32 acked)
{
	if (!cwnd_limited(tp) || tp->snd_cwnd < b->inflight_hi || b->inflight_hi == INF32)
		return;
	b->probe_up_acks += acked;
	if (b->probe_up_acks >= b->probe_up_cnt) {
		__u32 delta = b->probe_up_acks / b->probe_up_cnt;

		b->probe_up_acks -= delta * b->probe_up_cnt;
		b->inflight_hi += delta;
	}
	if (b->round_start)
		raise_inflight_hi_slope(tp, b);
}

static __always_inline bool time_to_probe_bw(struct tcp_sock *tp, struct bbr_ca *b)
{
	__u32 reno_rounds = min_t(__u32, bdp(b, model_bw(b), BBR_UNIT), bw_probe_max_rounds);

	if (now_us(tp) - b->cycle_stamp > b->bw_probe_wait_us || b->rounds_since_probe >= reno_rounds) {
		start_probe_refill(tp, b);
		return true;
	}
	return false;
}

static __always_inline void update_probe_bw(struct sock *sk, struct bbr_ca *b, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 inflight = packets_in_flight(tp);

	if (b->mode != PROBE_BW)
		return;
	switch (b->phase) {
	case PH_DOWN:
		if (time_to_probe_bw(tp, b))
			return;
		/* Queue drained (with headroom for others): cruise. */
		if (inflight <= min_t(__u32, inflight_with_headroom(b), bdp(b, max_bw(b), BBR_UNIT)))
			start_probe_cruise(b);
		break;
	case PH_CRUISE:
		time_to_probe_bw(tp, b);
		break;
	case PH_REFILL:
		if (b->round_start)
			start_probe_up(tp, b);
		break;
	case PH_UP:
		probe_inflight_hi_upward(tp, b, acked);
#if BBR_VERSION == 2
		/* v2 stops probing when it is risky (the last probe ended in loss and inflight is
		 * back at inflight_hi) or, after a min RTT in UP, when inflight reaches
		 * bw_probe_pif_gain x BDP (a queue is building). Losses stop it too. */
		if ((b->prev_probe_too_high && inflight >= b->inflight_hi) ||
		    (now_us(tp) - b->cycle_stamp > b->min_rtt_us &&
		     inflight >= bdp(b, max_bw(b), bw_probe_pif_gain))) {
			b->prev_probe_too_high = 0;
			start_probe_down(tp, b);
		}
#else
		/* Stop once bw stopped growing (losses stop it via inflight_too_high). */
		if (b->full_bw_now)
			start_probe_down(tp, b);
#endif
		break;
	}
}

/* ---- loss response ---------------------------------------------------------------- */

static __always_inline bool inflight_too_high(const struct rate_sample *rs)
{
	/* losses / inflight-at-send > 2%, approximated with the ACK's prior_in_flight. */
	return rs->losses > 0 && rs->prior_in_flight > 0 &&
	       (__u64)rs->losses * 100 > (__u64)rs->prior_in_flight * loss_thresh_pct;
}

static __always_inline void handle_inflight_too_high(struct tcp_sock *tp, struct bbr_ca *b,
						     const struct rate_sample *rs)
{
	b->bw_probe_samples = 0;
	b->prev_probe_too_high = 1;
	if (!rs->is_app_limited) {
		__u32 tgt = (__u64)target_inflight(b, tp->snd_cwnd) * beta / 1024;
#if BBR_VERSION == 2
		/* The lost packets left about a round ago: the volume then is what was too
		 * much. (The ACK's prior_in_flight is already shrunk by the marked losses and
		 * would put inflight_hi at the beta floor, well below the BDP, every time.) */
		__u32 tx_in_flight = max_t(__u32, b->inflight_max_prev, b->inflight_max_cur);
#else
		__u32 tx_in_flight = rs->prior_in_flight;
#endif

		b->inflight_hi = max_t(__u32, tx_in_flight, tgt);
	}
	if (b->mode == PROBE_BW && b->phase == PH_UP)
		start_probe_down(tp, b);
}

/* Once per round with loss, outside bw probing: cut the lower bounds by beta. */
static __always_inline void adapt_lower_bounds(struct tcp_sock *tp, struct bbr_ca *b)
{
	if (b->mode == PROBE_BW && (b->phase == PH_REFILL || b->phase == PH_UP))
		return;
#if BBR_VERSION == 2
	if (b->mode == STARTUP) /* probing too: the Startup loss exit handles loss there */
		return;
#endif
	if (!b->loss_in_round)
		return;
	if (b->bw_lo == ~0ULL)
		b->bw_lo = max_bw(b);
	if (b->inflight_lo == INF32)
		b->inflight_lo = tp->snd_cwnd;
	b->bw_lo = max_t(__u64, b->bw_latest, b->bw_lo * beta / 1024);
	b->inflight_lo = max_t(__u32, b->inflight_latest, (__u64)b->inflight_lo * beta / 1024);
}

/* ---- per-ACK model update ----------------------------------------------------------- */

static __always_inline void update_model(struct sock *sk, struct bbr_ca *b, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 now = now_us(tp);

	/* Round trips, counted in delivered data (a packet sent now is ACKed a round later). */
	b->round_start = 0;
	if (rs->interval_us > 0 && rs->prior_delivered >= b->next_rtt_delivered) {
		b->next_rtt_delivered = tp->delivered;
		b->inflight_max_prev = b->inflight_max_cur;
		b->inflight_max_cur = 0;
		b->round_count++;
		b->rounds_since_probe++;
		b->round_start = 1;
		b->packet_conservation = 0;
	}

	b->inflight_max_cur = max_t(__u32, b->inflight_max_cur, rs->prior_in_flight);

	/* Delivery rate sample -> max filter (app-limited samples only if they raise it). */
	if (rs->delivered > 0 && rs->interval_us > 0) {
		__u64 bw = ((__u64)rs->delivered << BW_SCALE) / (__u64)rs->interval_us;

		if (!rs->is_app_limited || bw >= max_bw(b))
			b->max_bw[0] = max_t(__u64, b->max_bw[0], bw);
		b->bw_latest = max_t(__u64, b->bw_latest, bw);
		b->inflight_latest = max_t(__u32, b->inflight_latest, (__u32)rs->delivered);
	}

	/* ACK aggregation: data ACKed beyond what bw explains, max over ~2x5 rounds. */
	if (b->round_start) {
		b->extra_acked_win_rtts_cnt++;
		if (b->extra_acked_win_rtts_cnt >= extra_acked_win_rtts) {
			b->extra_acked_win_rtts_cnt = 0;
			b->extra_acked_idx ^= 1;
			b->extra_acked[b->extra_acked_idx & 1] = 0;
		}
	}
	{
		__u64 elapsed = tp->delivered_mstamp - b->ack_epoch_mstamp;
		__u64 expected = (max_bw(b) * elapsed) >> BW_SCALE;
		__u32 extra;

		if (b->ack_epoch_acked <= expected || b->ack_epoch_acked + rs->acked_sacked >= (1U << 20)) {
			b->ack_epoch_acked = 0;
			b->ack_epoch_mstamp = tp->delivered_mstamp;
			expected = 0;
		}
		b->ack_epoch_acked += rs->acked_sacked;
		extra = b->ack_epoch_acked > expected ? b->ack_epoch_acked - (__u32)expected : 0;
		extra = min_t(__u32, extra, tp->snd_cwnd);
		if (extra > b->extra_acked[b->extra_acked_idx & 1])
			b->extra_acked[b->extra_acked_idx & 1] = extra;
	}

	/* Loss bookkeeping, in loss rounds. */
	b->loss_round_start = 0;
	if (rs->interval_us > 0 && rs->prior_delivered >= b->loss_round_delivered) {
		b->loss_round_delivered = tp->delivered;
		b->loss_round_start = 1;
	}
	if (rs->losses > 0) {
		b->loss_in_round = 1;
		b->loss_events_in_round++;
		if (inflight_too_high(rs) && (b->mode != STARTUP || b->full_bw_reached))
			handle_inflight_too_high(tp, b, rs);
	}
	if (rs->losses > 0)
		b->round_lost += rs->losses;
	if (rs->delivered > 0)
		b->round_delivered += rs->delivered;
	if (b->loss_round_start) {
		adapt_lower_bounds(tp, b);
#if BBR_VERSION == 2
		/* v2 leaves Startup at the end of a round in Recovery with >= full_loss_cnt loss
		 * events and a loss rate above loss_thresh; inflight_hi becomes the BDP. */
		if (b->mode == STARTUP && !b->full_bw_reached &&
		    BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state) == TCP_CA_Recovery &&
		    b->loss_events_in_round >= startup_full_loss_cnt &&
		    (__u64)b->round_lost * 100 > (__u64)(b->round_lost + b->round_delivered) * loss_thresh_pct) {
			b->full_bw_reached = 1;
			b->inflight_hi = bdp(b, max_bw(b), BBR_UNIT);
		}
#else
		/* Startup ends on sustained heavy loss too. */
		if (b->mode == STARTUP && !b->full_bw_reached && b->loss_in_round &&
		    b->loss_events_in_round >= startup_full_loss_cnt) {
			b->full_bw_reached = 1;
			b->inflight_hi = max_t(__u32, bdp(b, max_bw(b), BBR_UNIT), b->inflight_latest);
		}
#endif
		b->loss_in_round = 0;
		b->loss_events_in_round = 0;
		b->round_lost = 0;
		b->round_delivered = 0;
		b->bw_latest = 0;
		b->inflight_latest = 0;
	}

	/* Min RTT: a 5 s sample driving ProbeRTT, feeding a 10 s filter. */
	/* (Expiry is noted before the refresh below: it is what triggers ProbeRTT.) */
	b->probe_rtt_expired = now - b->probe_rtt_min_stamp > (__u64)probe_rtt_interval_ms * 1000;
	if (rs->rtt_us > 0) {
		__u32 rtt = (__u32)rs->rtt_us;

		if (rtt < b->probe_rtt_min_us || b->probe_rtt_expired) {
			b->probe_rtt_min_us = rtt;
			b->probe_rtt_min_stamp = now;
		}
	}
	if (b->probe_rtt_min_us < b->min_rtt_us ||
	    now - b->min_rtt_stamp > (__u64)min_rtt_win_ms * 1000) {
		b->min_rtt_us = b->probe_rtt_min_us;
		b->min_rtt_stamp = b->probe_rtt_min_stamp;
	}

	/* Full-bandwidth detector: three rounds without 25% growth. */
	if (b->round_start && !rs->is_app_limited) {
		if (max_bw(b) * BBR_UNIT >= b->full_bw * full_bw_thresh) {
			b->full_bw = max_bw(b);
			b->full_bw_cnt = 0;
		} else if (++b->full_bw_cnt >= full_bw_cnt) {
			b->full_bw_now = 1;
			b->full_bw_reached = 1;
		}
	}
}

static __always_inline void update_state(struct sock *sk, struct bbr_ca *b, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 now = now_us(tp);

	if (b->mode == STARTUP && b->full_bw_reached) {
		b->mode = DRAIN;
		b->pacing_gain = drain_pacing_gain;
		b->cwnd_gain = startup_cwnd_gain;
		tp->snd_ssthresh = bdp(b, max_bw(b), BBR_UNIT);
	}
	if (b->mode == DRAIN && packets_in_flight(tp) <= bdp(b, max_bw(b), BBR_UNIT)) {
		b->mode = PROBE_BW;
		start_probe_down(tp, b);
	}
	update_probe_bw(sk, b, acked);

	/* ProbeRTT when the RTT sample is stale (and we are not just back from idle). */
	if (b->mode != PROBE_RTT && !b->idle_restart && b->probe_rtt_expired) {
		b->mode = PROBE_RTT;
		b->pacing_gain = BBR_UNIT;
		b->cwnd_gain = probe_rtt_cwnd_gain;
		b->prior_cwnd = max_t(__u32, b->prior_cwnd, tp->snd_cwnd);
		b->probe_rtt_done_stamp = 0;
	}
	if (b->mode == PROBE_RTT) {
		__u32 target = max_t(__u32, bdp(b, model_bw(b), probe_rtt_cwnd_gain), min_pipe_cwnd);

		if (!b->probe_rtt_done_stamp && packets_in_flight(tp) <= target) {
			b->probe_rtt_done_stamp = now + (__u64)probe_rtt_duration_ms * 1000;
			b->probe_rtt_round_done = 0;
			b->next_rtt_delivered = tp->delivered;
		} else if (b->probe_rtt_done_stamp) {
			if (b->round_start)
				b->probe_rtt_round_done = 1;
			if (b->probe_rtt_round_done && now > b->probe_rtt_done_stamp) {
				b->probe_rtt_min_stamp = now;
				tp->snd_cwnd = max_t(__u32, tp->snd_cwnd, b->prior_cwnd);
				b->prior_cwnd = 0;
				reset_lower_bounds(b);
				if (b->full_bw_reached) {
					b->mode = PROBE_BW;
					start_probe_down(tp, b);
					start_probe_cruise(b);
				} else {
					enter_startup(b);
				}
			}
		}
	}
	b->idle_restart = 0;
}

static __always_inline void bbr_set_cwnd(struct sock *sk, struct bbr_ca *b, const struct rate_sample *rs,
				     __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u8 state = BPF_CORE_READ_BITFIELD(inet_csk(sk), icsk_ca_state);
	__u32 cwnd = tp->snd_cwnd, target, cap = INF32;

	/* Loss recovery: give back what was lost; packet conservation for the first round. */
	if (state >= TCP_CA_Recovery) {
		if (state != b->prev_ca_state) {
			b->prior_cwnd = max_t(__u32, b->prior_cwnd, cwnd);
			b->packet_conservation = 1;
			b->next_rtt_delivered = tp->delivered;
			cwnd = packets_in_flight(tp) + acked;
		} else if (rs->losses > 0) {
			cwnd = cwnd > (__u32)rs->losses ? cwnd - rs->losses : 1;
		}
		if (b->packet_conservation)
			cwnd = max_t(__u32, cwnd, packets_in_flight(tp) + acked);
	} else if (b->prev_ca_state >= TCP_CA_Recovery) {
		/* Recovery over: back to the window we had. */
		cwnd = max_t(__u32, cwnd, b->prior_cwnd);
		b->prior_cwnd = 0;
		b->packet_conservation = 0;
	}
	b->prev_ca_state = state;

	target = quantization_budget(b, bdp(b, model_bw(b), b->cwnd_gain) +
					    (__u32)(((__u64)extra_acked(b) * extra_acked_gain) >> 8));
	if (!b->packet_conservation) {
		if (b->full_bw_reached)
			cwnd = min_t(__u32, cwnd + acked, target);
		else if (cwnd < target || tp->delivered < 10)
			cwnd = cwnd + acked;
	}
	cwnd = max_t(__u32, cwnd, min_pipe_cwnd);

	/* Bound by the model: inflight_hi while probing, with headroom when cruising. */
	if (b->mode == PROBE_BW && b->phase != PH_CRUISE)
		cap = b->inflight_hi;
	else if (b->mode == PROBE_RTT || (b->mode == PROBE_BW && b->phase == PH_CRUISE))
		cap = inflight_with_headroom(b);
	cap = min_t(__u32, cap, b->inflight_lo);
	cap = max_t(__u32, cap, min_pipe_cwnd);
	cwnd = min_t(__u32, cwnd, cap);
	if (b->mode == PROBE_RTT)
		cwnd = min_t(__u32, cwnd, max_t(__u32, bdp(b, model_bw(b), probe_rtt_cwnd_gain), min_pipe_cwnd));

	tp->snd_cwnd = min_t(__u32, cwnd, tp->snd_cwnd_clamp);
}

CC_PROG(void, bbr_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct bbr_ca *b = bbr_get(sk);
	__u32 acked;

	if (!b)
		return;
	acked = rs->acked_sacked;
	update_model(sk, b, rs);
	update_state(sk, b, acked);
	set_pacing_rate(sk, b, model_bw(b), b->pacing_gain);
	bbr_set_cwnd(sk, b, rs, acked);
}

CC_PROG(__u32, bbr_ssthresh, struct sock *sk)
{
	struct bbr_ca *b = bbr_get(sk);

	/* BBR does not use ssthresh; remember cwnd for the end of recovery. */
	if (b)
		b->prior_cwnd = max_t(__u32, b->prior_cwnd, tcp_sk(sk)->snd_cwnd);
	return tcp_sk(sk)->snd_ssthresh;
}

CC_PROG(__u32, bbr_undo_cwnd, struct sock *sk)
{
	struct bbr_ca *b = bbr_get(sk);

	/* A spurious loss: forget what it taught the model. */
	if (b) {
		reset_full_bw(b);
		reset_lower_bounds(b);
		b->loss_in_round = 0;
	}
	return tcp_sk(sk)->snd_cwnd;
}

CC_PROG(void, bbr_set_state, struct sock *sk, __u8 new_state)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr_ca *b = bbr_get(sk);

	if (!b || new_state != TCP_CA_Loss)
		return;
	/* RTO: count a loss round from here; bw may have collapsed. */
	b->prev_ca_state = TCP_CA_Loss;
	b->prior_cwnd = max_t(__u32, b->prior_cwnd, tp->snd_cwnd);
	b->round_start = 1;
	b->loss_round_delivered = tp->delivered;
	b->loss_in_round = 1;
	reset_full_bw(b);
	if (b->mode == PROBE_BW && b->phase == PH_UP)
		start_probe_down(tp, b);
}

CC_PROG(void, bbr_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr_ca *b = bbr_get(sk);

	if (!b || ev != CA_EVENT_TX_START || !tp->app_limited)
		return;
	/* Restart from idle: pace at the estimated bw, not above or below it. */
	b->idle_restart = 1;
	b->ack_epoch_mstamp = tp->tcp_mstamp;
	b->ack_epoch_acked = 0;
	if (b->mode == PROBE_BW)
		set_pacing_rate(sk, b, model_bw(b), BBR_UNIT);
}

CC_PROG(__u32, bbr_sndbuf_expand, struct sock *sk)
{
	/* Pacing at up to 2.77x needs a larger send buffer than Reno's 2x. */
	return 3;
}

CC_PROG(__u32, bbr_min_tso_segs, struct sock *sk)
{
	/* Below ~1.2 Mbit/s send single segments to keep pacing smooth. */
	return sk->sk_pacing_rate < (1200000 / 8) ? 1 : 2;
}

/* The struct_ops each version registers: the engine's callbacks under its own name. */
#define BBR_STRUCT_OPS(var, cc_name)                         \
	SEC(".struct_ops.link")                              \
	struct tcp_congestion_ops var = {                    \
		.init = (void *)bbr_init,                    \
		.release = (void *)bbr_release,              \
		.cong_control = (void *)bbr_cong_control,    \
		.ssthresh = (void *)bbr_ssthresh,            \
		.undo_cwnd = (void *)bbr_undo_cwnd,          \
		.set_state = (void *)bbr_set_state,          \
		.cwnd_event = (void *)bbr_cwnd_event,        \
		.sndbuf_expand = (void *)bbr_sndbuf_expand,  \
		.min_tso_segs = (void *)bbr_min_tso_segs,    \
		.name = cc_name,                             \
	}

#endif /* BBR_CORE_H */
