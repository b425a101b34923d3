package dispatcher

import (
	"math"
	"net/http"
	"time"
)

// limiter is one endpoint's adaptive concurrency limit in one worker
// process: how many requests it may have in flight. It is an AIMD limiter
// with a slow start and a latency signal, in the manner of Netflix's
// concurrency-limits and of TCP's congestion window:
//
//   - It starts at the worker's initial limit and, while the endpoint
//     answers 2xx at a steady latency and the limit is in use (at least
//     half of it in flight), grows by one per success: it doubles every
//     round trip until the first sign of trouble (slow start), then grows
//     by about one per round trip (ssthresh, as TCP's).
//   - Before that first sign, while more deliveries want to go in a round
//     trip than the limit lets through (those in flight and those waiting
//     for the endpoint: a backlog, the gate's count) and an answer came
//     within rampTolerance of the baseline, that success grows
//     it by more than one (the ramp): ×4 per 100 ms of the endpoint's
//     round trip, so ×4 per round trip up to 100 ms, ×16 at 200 ms, and
//     no more than ×16 however slow (rampGain). So a healthy endpoint with
//     a backlog reaches the concurrency it needs within about a second
//     whatever its latency, not a burst's length; and since the growth is
//     per success, an endpoint that refuses past its capacity is cut as
//     soon as its first refusals come back, a few requests past it (and
//     again while those sent since are refused), while one that slows past
//     it ends the ramp with its first slower answers — up to ×16 past its
//     capacity for a slow one, which the latency's gradient then undoes.
//   - It shrinks when the endpoint is overloaded: a 429, 503 or other 5xx,
//     a timeout or a refused connection cuts it by overloadCut; a smoothed
//     latency that climbs past tolerance times the endpoint's baseline
//     (its lowest latency) cuts it by the latency's gradient: in the ratio
//     of that threshold to the answer's latency, by latencyCut at
//     least and by half at most; a slower answer of the same round trip
//     deepens that cut instead of making another (cutLatency). A cut
//     happens at most once per round trip, so that the requests of one
//     window failing together count as one sign, not as many; but a 429 or
//     5xx to a request sent after the last cut was sent within the limit
//     that cut left, and cuts again. A timeout or a refused connection cuts
//     at once, whatever the last cut: those take long to come back and are
//     the surest signs.
//   - Other answers (3xx, 4xx but 429, an attempt not sent) say nothing of
//     capacity and leave it as it is.
//
// It stays between 1 and the ceiling (the endpoint's max_in_flight). It is
// a pure function of the outcomes and times it is told; it is not safe for
// concurrent use (the gate holds its lock).
type limiter struct {
	initial  float64
	limit    float64
	ssthresh float64 // slow start while limit < ssthresh
	baseline time.Duration
	srtt     time.Duration // smoothed latency of 2xx answers
	winMin   time.Duration // lowest latency of the window being gathered
	winN     int
	lastCut  time.Time
	peak     float64 // the limit before the run of cuts that lastCut ended
}

// Limiter tuning.
const (
	limiterTolerance = 2.0                    // latency past tolerance × baseline (+ slack) is climbing
	limiterSlack     = 50 * time.Millisecond  // jitter no receiver is blamed for
	overloadCut      = 0.8                    // multiplicative decrease on overload
	latencyCut       = 0.9                    // and on a latency that climbs, at most
	gradientFloor    = 0.5                    // and at least: the latency's gradient, no more than halved
	baselineWindow   = 100                    // 2xx answers per baseline window
	minCutGap        = 100 * time.Millisecond // the shortest round trip a cut waits for
	rampStep         = 3                      // growth per success in the ramp: ×4 per rampPace of round trip
	rampTolerance    = 1.25                   // an answer within rampTolerance × baseline (+ rampSlack) holds the ramp
	rampSlack        = 10 * time.Millisecond  // the ramp's jitter, tighter than limiterSlack
	rampPace         = 100 * time.Millisecond // the ramp grows ×(1+rampStep) per rampPace of the endpoint's baseline
	rampMaxGrowth    = 16                     // and at most this much per round trip
)

// signal is what one attempt's outcome says of its endpoint's capacity.
type signal int

const (
	signalNone        signal = iota // nothing: not sent, 3xx, 4xx but 429
	signalOK                        // 2xx
	signalOverload                  // 429: the receiver is there and refuses
	signalServerError               // 5xx: likewise, and a failure for the circuit breaker
	signalTimeout                   // timed out, refused connection, other network error
)

// signalOf reads a response.
func signalOf(r Response) signal {
	switch c := r.StatusCode; {
	case r.Err != nil:
		return signalTimeout
	case c >= 200 && c < 300:
		return signalOK
	case c >= 500:
		return signalServerError
	case c == http.StatusTooManyRequests:
		return signalOverload
	}
	return signalNone
}

func newLimiter(initial int) limiter {
	return limiter{initial: float64(max(initial, 1)), limit: float64(max(initial, 1)), ssthresh: math.Inf(1)}
}

// current is the limit as a whole number of requests, within [1, ceiling].
func (l *limiter) current(ceiling int) int {
	return max(1, min(int(l.limit), ceiling))
}

// observe tells the limiter how one request ended at now: sig after rtt,
// with inFlight requests (this one included) in flight as it was sent and
// waiting deliveries of the endpoint waiting for room as it ended.
func (l *limiter) observe(now time.Time, sig signal, rtt time.Duration, inFlight, waiting, ceiling int) {
	switch sig {
	case signalOK:
		l.sample(rtt)
		switch {
		case l.climbing(l.srtt):
			l.cutLatency(now, rtt)
		case l.ramping(rtt, inFlight, waiting) && float64(inFlight)*(1+l.rampGain()) >= l.limit:
			// In use as the ramp counts it: the requests of the round trip
			// before, each of which may bring rampGain more.
			l.limit += l.rampGain()
		case float64(inFlight)*2 >= l.limit: // in use: a limit nobody uses proves nothing
			if l.limit < l.ssthresh {
				l.limit++
			} else {
				l.limit += 1 / l.limit
			}
		}
	case signalOverload, signalServerError:
		// A refusal of a request sent after the last cut is a sign of its
		// own: the limit that cut left is still too high. Without it, a
		// receiver that refuses at once would have the requests past its
		// capacity refused again and again for a whole round trip of its
		// answers before the next cut.
		l.cut(now, overloadCut, false, now.Add(-rtt).After(l.lastCut))
	case signalTimeout:
		l.cut(now, overloadCut, true, false)
	}
	l.limit = max(1, min(l.limit, float64(ceiling)))
}

// sample adds a 2xx answer's latency to the smoothed latency and the
// baseline: the lowest latency seen, or a window's lowest when even that
// was past tolerance at a low limit, so the baseline follows a receiver
// that became slower for good.
func (l *limiter) sample(rtt time.Duration) {
	if l.srtt == 0 {
		l.srtt = rtt
	} else {
		l.srtt += (rtt - l.srtt) / 8
	}
	if l.winN == 0 || rtt < l.winMin {
		l.winMin = rtt
	}
	l.winN++
	if l.baseline == 0 || rtt < l.baseline {
		l.baseline = rtt
	}
	if l.winN >= baselineWindow {
		// Even the best answer of a whole window was past tolerance with
		// no more in flight than the limit started from: the receiver
		// became slower for good (our own load would have been cut back
		// until the latency fell), so that is its baseline now.
		if l.climbing(l.winMin) && l.limit <= l.initial {
			l.baseline = l.winMin
		}
		l.winN = 0
	}
}

// ramping reports whether a success that took rtt, sent among inFlight
// requests with waiting deliveries waiting, grows the limit by rampGain:
// no sign of trouble yet, more wanting to go in a round trip (those in
// flight and those waiting) than the limit lets, and an answer about as
// fast as the endpoint's best.
func (l *limiter) ramping(rtt time.Duration, inFlight, waiting int) bool {
	return math.IsInf(l.ssthresh, 1) && float64(inFlight+waiting) > l.limit &&
		rtt <= time.Duration(rampTolerance*float64(l.baseline))+rampSlack
}

// settled reports whether the limit has met the endpoint's capacity: a
// sign of trouble ended slow start, so the limit moves by little and the
// endpoint's slots free steadily rather than in a ramp's bursts a round
// trip apart.
func (l *limiter) settled() bool { return !math.IsInf(l.ssthresh, 1) }

// rampGain is the ramp's growth per success: ×(1+rampStep) per rampPace of the
// endpoint's round trip (its baseline), so that the ramp takes about as
// long in time whatever the endpoint's latency, and at most ×rampMaxGrowth
// per round trip.
func (l *limiter) rampGain() float64 {
	trips := max(1, float64(l.baseline)/float64(rampPace))
	return min(math.Pow(1+rampStep, trips), rampMaxGrowth) - 1
}

// gradient is the cut for a latency that climbed, as the latest answer's
// latency rtt says: the limit in the ratio of the latency past which it is
// climbing (tolerance × baseline + slack) to rtt, between gradientFloor and
// latencyCut. An overshoot of many times the endpoint's capacity is undone
// in a few round trips, not in dozens of latencyCuts; a fast endpoint whose
// answers slow by some tens of milliseconds (this machine's own load, as
// often as the receiver's) is cut no more than before.
func (l *limiter) gradient(rtt time.Duration) float64 {
	ok := limiterTolerance*float64(l.baseline) + float64(limiterSlack)
	return max(gradientFloor, min(latencyCut, ok/float64(rtt)))
}

// climbing reports whether latency d is past tolerance of the baseline.
func (l *limiter) climbing(d time.Duration) bool {
	return d > time.Duration(limiterTolerance*float64(l.baseline))+limiterSlack
}

// cutLatency cuts the limit for a latency that climbed, as far as the
// answer that took rtt says (gradient). Within the round trip of the last
// cut it deepens that cut instead, to the gradient of the limit the cut
// started from: a cut made at the first answer past tolerance is as deep
// as that answer, and the slower answers of the same window, sent before
// it, say how far it should have gone, not that it should go again.
func (l *limiter) cutLatency(now time.Time, rtt time.Duration) {
	f := l.gradient(rtt)
	if now.Sub(l.lastCut) >= max(l.srtt, minCutGap) {
		l.cut(now, f, false, false)
		return
	}
	if deeper := max(1, l.peak*f); deeper < l.limit {
		l.limit, l.ssthresh = deeper, deeper
	}
}

// cut multiplies the limit by factor, at most once per round trip unless
// always or again (the request was sent after the last cut), and ends
// slow start.
func (l *limiter) cut(now time.Time, factor float64, always, again bool) {
	fresh := now.Sub(l.lastCut) >= max(l.srtt, minCutGap) // not within the round trip of the last cut
	if !always && !fresh && !again {
		return
	}
	if fresh {
		l.peak = l.limit
	}
	l.limit = max(1, l.limit*factor)
	l.ssthresh = l.limit
	if always {
		// A run of timeouts (a blip of the network, a receiver that hung
		// for a while) can take the limit to the floor; as TCP after a
		// timeout, slow start then climbs back to half the limit it had
		// before the run.
		l.ssthresh = max(l.limit, l.peak/2)
	}
	l.lastCut = now
	if l.srtt > 0 {
		// The latency that climbed was the old limit's: start again from
		// the baseline, or every answer until srtt falls would cut again.
		l.srtt = l.baseline
	}
}
