package gateway

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The reset budget of Go's HTTP/2 server (server.fast_http2: false).
//
// The lane (internal/transport/h2) charges every stream the client resets or has
// refused to a per-connection budget and sends GOAWAY ENHANCE_YOUR_CALM
// past it. Go's HTTP/2 server has no hook for that: it handles RST_STREAM
// inside its serve loop (cancelling the stream's context) and tells the
// program nothing, and its write_timeout resets streams itself; its
// CountError hook is per server and is not called for either. What the
// gateway does see is the effect that costs it something: a handler whose
// request context ended before the handler returned, i.e. a stream reset
// (by either side) or a connection lost before its response was written
// (the 499 path, which may have started a fill). So the budget is kept
// per connection through http.Server.ConnContext and charged by those
// requests, with the lane's figures: 200, refilled at 50 a second. Past
// it, every later response on the connection carries "Connection: close",
// which Go's HTTP/2 server turns into a graceful GOAWAY (NO_ERROR; it
// offers no ENHANCE_YOUR_CALM): it then ignores every new stream, lets the
// open ones finish and closes the connection. Streams reset before their
// handler ran cost nothing and are not charged (Go's server caps running
// handlers at MAX_CONCURRENT_STREAMS and starts no more). The handlers a
// connection runs at once are bounded by MAX_CONCURRENT_STREAMS, set to
// the lane's 128.
const (
	h2ResetBurst = 200 // as internal/transport/h2's resetBurst
	h2ResetRate  = 50  // tokens a second, as internal/transport/h2's resetRate
	// h2MaxStreams is the MAX_CONCURRENT_STREAMS Go's HTTP/2 server
	// advertises, as the lane does (Go's default is 250).
	h2MaxStreams = 128
)

// resetBudget is one connection's budget of streams ended before their
// response.
type resetBudget struct {
	mu     sync.Mutex // guards tokens, at and spent
	tokens float64
	at     time.Time // when tokens was last refilled; zero before the first charge
	spent  bool      // past the budget: the connection is asked to go away
}

type resetBudgetKey struct{}

// withResetBudget is the public server's ConnContext: every connection
// gets a budget (HTTP/1.1 ones never use it).
func withResetBudget(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, resetBudgetKey{}, &resetBudget{tokens: h2ResetBurst})
}

// charge takes a token for a stream ended before its response at now and
// reports whether that spent the budget (true once per connection).
func (b *resetBudget) charge(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.at.IsZero() && now.After(b.at) {
		b.tokens = min(h2ResetBurst, b.tokens+now.Sub(b.at).Seconds()*h2ResetRate)
	}
	b.at = now
	if b.spent {
		return false
	}
	if b.tokens < 1 {
		b.spent = true
		return true
	}
	b.tokens--
	return false
}

// isSpent reports whether the connection was asked to go away.
func (b *resetBudget) isSpent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.spent
}

// connCloseValue is the Connection header that makes Go's HTTP/2 server
// send GOAWAY; shared, never mutated.
var connCloseValue = []string{"close"}

// resetBudgetCheck charges the requests Go's HTTP/2 server handles whose
// stream ended before the handler returned to their connection's budget,
// and marks every response of a connection past it "Connection: close"
// (GOAWAY). It wraps the handler of the public http.Server only: the lanes
// keep their own accounting.
func (g *Gateway) resetBudgetCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := r.Context().Value(resetBudgetKey{}).(*resetBudget)
		if b == nil || r.ProtoMajor != 2 {
			next.ServeHTTP(w, r)
			return
		}
		if b.isSpent() {
			w.Header()["Connection"] = connCloseValue
		}
		next.ServeHTTP(w, r)
		if r.Context().Err() == nil || !b.charge(g.clk.Now()) {
			return
		}
		g.metrics.h2ResetGoaways.Inc()
		g.log.Info("http2 connection past its reset budget: GOAWAY on its next response",
			zap.String("remote", r.RemoteAddr), zap.Int("burst", h2ResetBurst), zap.Int("per_second", h2ResetRate))
	})
}
