// SPDX-License-Identifier: GPL-2.0
/*
 * BBRv3, written from draft-ietf-ccwg-bbr (Cardwell, Swett, Jacobson et al.), which
 * specifies BBR version 3, with the draft's constants. Model-based: it estimates the
 * bottleneck bandwidth (max filter over two ProbeBW cycles) and the round-trip
 * propagation delay (min filter, 10 s), paces at pacing_gain * bw and bounds inflight
 * by cwnd_gain * BDP, plus two loss-derived bounds: inflight_hi (the volume at which
 * losses exceeded 2%, probed upward in ProbeBW_UP) and bw_lo / inflight_lo (cut by
 * beta = 0.7 after each round with loss, reset at the next probe).
 *
 * States: Startup (gain 2.77; leaves after three rounds of < 25% bw growth, or on
 * six loss events with > 2% loss in a round), Drain (0.35), ProbeBW cycling
 * DOWN (0.9) -> CRUISE (1.0) -> REFILL (1.0, one round) -> UP (1.25, cwnd gain 2.25),
 * probing again after 2-3 s or after the Reno-coexistence round count, and ProbeRTT
 * (cwnd 0.5 BDP for 200 ms + one round when the 5 s min-RTT sample expires).
 *
 * Not implemented (documented limits): the ECN (CE ratio) response, and the
 * draft's exact per-packet loss-rate test, which needs the inflight at the time the
 * lost packet was sent (rate_sample.tx_in_flight is not in this kernel); the loss
 * rate is taken as losses / prior_in_flight of the ACK that reported them.
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

/* Gains are in 1/256 (BBR_UNIT). */
PARAM(__u32, startup_pacing_gain, 709, 256, "Startup pacing gain, /256 (709 = 2.77 = 4 ln 2)");
PARAM(__u32, startup_cwnd_gain, 512, 256, "Startup cwnd gain, /256 (512 = 2)");
PARAM(__u32, drain_pacing_gain, 90, 256, "Drain pacing gain, /256 (90 = 0.35)");
PARAM(__u32, cwnd_gain, 512, 256, "default cwnd gain, /256 (512 = 2)");
PARAM(__u32, probe_down_pacing_gain, 230, 256, "ProbeBW_DOWN pacing gain, /256 (230 = 0.9)");
PARAM(__u32, cruise_pacing_gain, 256, 256, "ProbeBW_CRUISE/REFILL pacing gain, /256 (256 = 1)");
PARAM(__u32, probe_up_pacing_gain, 320, 256, "ProbeBW_UP pacing gain, /256 (320 = 1.25)");
PARAM(__u32, probe_up_cwnd_gain, 576, 256, "ProbeBW_UP cwnd gain, /256 (576 = 2.25)");
PARAM(__u32, loss_thresh_pct, 2, 100, "loss rate that marks inflight too high, /100");
PARAM(__u32, beta, 717, 1024, "multiplicative cut of bw_lo/inflight_lo on loss, /1024 (0.7)");
PARAM(__u32, headroom_pct, 15, 100, "inflight_hi headroom left for other flows, /100");
PARAM(__u32, full_bw_thresh, 320, 256, "Startup: growth that counts as progress, /256 (1.25)");
PARAM(__u32, full_bw_cnt, 3, 1, "Startup: rounds without progress before leaving");
PARAM(__u32, startup_full_loss_cnt, 6, 1, "Startup: loss events in a round that end it");
PARAM(__u32, min_rtt_win_ms, 10000, 1, "min RTT filter window (ms)");
PARAM(__u32, probe_rtt_interval_ms, 5000, 1, "ProbeRTT when the RTT sample is this old (ms)");
PARAM(__u32, probe_rtt_duration_ms, 200, 1, "time spent at the ProbeRTT cwnd (ms)");
PARAM(__u32, probe_rtt_cwnd_gain, 128, 256, "ProbeRTT cwnd as a fraction of BDP, /256 (0.5)");
PARAM(__u32, bw_probe_base_ms, 2000, 1, "ProbeBW: wait at least this long between probes (ms)");
PARAM(__u32, bw_probe_rand_ms, 1000, 1, "... plus up to this much at random (ms)");
PARAM(__u32, bw_probe_max_rounds, 63, 1, "ProbeBW: probe after at most this many rounds (Reno coexistence)");
PARAM(__u32, extra_acked_gain, 256, 256, "weight of the ACK-aggregation allowance, /256");
PARAM(__u32, extra_acked_win_rtts, 5, 1, "rounds per half of the ACK-aggregation max filter");
PARAM(__u32, pacing_margin_pct, 1, 100, "pace this far below the estimated bw, /100");
PARAM(__u32, min_pipe_cwnd, 4, 1, "smallest cwnd BBR uses (segments)");

#define BBR_VERSION 3
#include "bbr_core.h"

BBR_STRUCT_OPS(bbr3_ops, "cc_bbr3");
