// SPDX-License-Identifier: GPL-2.0
/*
 * BBRv2, as specified by draft-cardwell-iccrg-bbr-congestion-control-02 and released as
 * Linux "v2alpha" (Cardwell, Cheng, Hassas Yeganeh, Swett, Jacobson et al.), with that
 * release's default constants. The engine is shared with BBRv3 (bbr_core.h); v3 is v2
 * plus retuned constants and a different ProbeBW_UP exit, so what v2 does differently
 * is either a PARAM default below or a `BBR_VERSION == 2` branch in the engine:
 *
 *   - Startup paces and sizes cwnd at 2.89 = 2/ln 2 (v3: 2.77 and 2.0); Drain at 1/2.89.
 *   - ProbeBW: DOWN 0.75 (v3 0.9), CRUISE/REFILL 1.0, UP 1.25 with cwnd gain 2.0
 *     (v3 2.25). UP ends on loss (> 2% of inflight), or when it is risky (the previous
 *     probe ended in loss and inflight is back at inflight_hi), or after one min RTT in
 *     UP once inflight reaches 1.25 x BDP (v3: when bw stops growing).
 *   - The next probe after 2-3 s (random) or after min(BDP, 63) rounds, the round count
 *     starting at random in 0..1 (Reno coexistence).
 *   - Startup also ends at the end of a round in Recovery with >= 8 loss events and a
 *     loss rate > 2% (v3: 6 events), setting inflight_hi to the BDP.
 *   - Loss: inflight_hi = max(inflight, 0.7 x target inflight) when a round's loss rate
 *     exceeds 2%; bw_lo/inflight_lo cut by 0.7 per lossy round outside bw probing
 *     (Startup, REFILL, UP); 15% headroom below inflight_hi while cruising.
 *   - ProbeRTT every 5 s (RTT sample expiry), cwnd 0.5 x BDP for 200 ms + one round.
 *
 * Not implemented: the ECN (CE-ratio) response (ecn_thresh 0.5, ecn_factor 1/3,
 * ecn_alpha_gain 1/16, only below 5 ms min RTT), which v2alpha ships disabled
 * (bbr_ecn_enable = false), so default v2alpha behaves the same on the non-ECN flows
 * the lab runs; the draft's per-packet loss-rate test (losses / inflight when the lost
 * packet was sent: rate_sample.tx_in_flight is not in this kernel; the ACK's
 * prior_in_flight stands in); v2alpha's "fast path" and fast-ACK-mode (CPU savings and
 * receiver tweaks, no change to the model).
 */
#include "cc_common.h"

char _license[] SEC("license") = "GPL";

/* Gains are in 1/256 (BBR_UNIT). */
PARAM(__u32, startup_pacing_gain, 739, 256, "Startup pacing gain, /256 (739 = 2.885 = 2/ln 2)");
PARAM(__u32, startup_cwnd_gain, 739, 256, "Startup cwnd gain, /256 (739 = 2.885)");
PARAM(__u32, drain_pacing_gain, 88, 256, "Drain pacing gain, /256 (88 = 1/2.885)");
PARAM(__u32, cwnd_gain, 512, 256, "default cwnd gain, /256 (512 = 2)");
PARAM(__u32, probe_down_pacing_gain, 192, 256, "ProbeBW_DOWN pacing gain, /256 (192 = 0.75)");
PARAM(__u32, cruise_pacing_gain, 256, 256, "ProbeBW_CRUISE/REFILL pacing gain, /256 (256 = 1)");
PARAM(__u32, probe_up_pacing_gain, 320, 256, "ProbeBW_UP pacing gain, /256 (320 = 1.25)");
PARAM(__u32, probe_up_cwnd_gain, 512, 256, "ProbeBW_UP cwnd gain, /256 (512 = 2)");
PARAM(__u32, bw_probe_pif_gain, 320, 256, "ProbeBW_UP ends when inflight reaches this x BDP, /256 (1.25)");
PARAM(__u32, loss_thresh_pct, 2, 100, "loss rate that marks inflight too high, /100");
PARAM(__u32, beta, 717, 1024, "multiplicative cut of inflight_hi/bw_lo/inflight_lo on loss, /1024 (0.7)");
PARAM(__u32, headroom_pct, 15, 100, "inflight_hi headroom left for other flows, /100");
PARAM(__u32, full_bw_thresh, 320, 256, "Startup: growth that counts as progress, /256 (1.25)");
PARAM(__u32, full_bw_cnt, 3, 1, "Startup: rounds without progress before leaving");
PARAM(__u32, startup_full_loss_cnt, 8, 1, "Startup: loss events in a Recovery round that end it");
PARAM(__u32, min_rtt_win_ms, 10000, 1, "min RTT filter window (ms)");
PARAM(__u32, probe_rtt_interval_ms, 5000, 1, "ProbeRTT when the RTT sample is this old (ms)");
PARAM(__u32, probe_rtt_duration_ms, 200, 1, "time spent at the ProbeRTT cwnd (ms)");
PARAM(__u32, probe_rtt_cwnd_gain, 128, 256, "ProbeRTT cwnd as a fraction of BDP, /256 (0.5)");
PARAM(__u32, bw_probe_base_ms, 2000, 1, "ProbeBW: wait at least this long between probes (ms)");
PARAM(__u32, bw_probe_rand_ms, 1000, 1, "... plus up to this much at random (ms)");
PARAM(__u32, bw_probe_max_rounds, 63, 1, "ProbeBW: probe after at most this many rounds (Reno coexistence)");
PARAM(__u32, bw_probe_rand_rounds, 2, 1, "... that round count starts at random in [0, this)");
PARAM(__u32, extra_acked_gain, 256, 256, "weight of the ACK-aggregation allowance, /256");
PARAM(__u32, extra_acked_win_rtts, 5, 1, "rounds per half of the ACK-aggregation max filter");
PARAM(__u32, pacing_margin_pct, 1, 100, "pace this far below the estimated bw, /100");
PARAM(__u32, min_pipe_cwnd, 4, 1, "smallest cwnd BBR uses (segments)");

#define BBR_VERSION 2
#include "bbr_core.h"

BBR_STRUCT_OPS(bbr2_ops, "cc_bbr2");
