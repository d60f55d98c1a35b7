package proxy

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// Refusals an operator must be able to see: a 403 carries a short body
// saying why (Caddy's default error handling sends none), and each cause
// is logged at the default level, at most once per refusalLogEvery with
// the count of those not logged in between.

const refusalLogEvery = time.Minute

// Causes of logged refusals.
const (
	causeOrigin    = "origin_address" // an origin on an address allow_origins does not permit
	causeBlacklist = "blacklisted"    // an origin on the blacklist
	causePeer      = "peer_address"   // a peer reference to an address allow_peers does not permit
)

// rateLimitedLog lets one log line per cause through per interval.
type rateLimitedLog struct {
	mu         sync.Mutex
	every      time.Duration
	last       map[string]time.Time
	suppressed map[string]int
}

func newRateLimitedLog(every time.Duration) *rateLimitedLog {
	return &rateLimitedLog{every: every, last: map[string]time.Time{}, suppressed: map[string]int{}}
}

// allow reports whether a line for cause may be logged now and how many
// were held back since the last one.
func (l *rateLimitedLog) allow(cause string, now time.Time) (ok bool, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, seen := l.last[cause]; seen && now.Sub(last) < l.every {
		l.suppressed[cause]++
		return false, 0
	}
	l.last[cause] = now
	held = l.suppressed[cause]
	delete(l.suppressed, cause)
	return true, held
}

// refusals is process-wide: the interval bounds the log, however many
// proxies there are.
var refusals = newRateLimitedLog(refusalLogEvery)

// logRefusal logs a refusal of cause, rate-limited.
func logRefusal(logger *zap.Logger, cause, msg string, fields ...zap.Field) {
	if logger == nil {
		return
	}
	ok, held := refusals.allow(cause, time.Now())
	if !ok {
		return
	}
	fields = append(fields, zap.String("cause", cause), zap.Int("not_logged_since_last", held),
		zap.Duration("logged_at_most_every", refusalLogEvery))
	logger.Warn(msg, fields...)
}
