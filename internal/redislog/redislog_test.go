package redislog

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *buffer) Sync() error                 { return nil }

func TestLinesAreJSONAndRateLimited(t *testing.T) {
	var out buffer
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), &out, zapcore.DebugLevel)
	l := New(zap.New(core))
	for range 50 {
		l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %s", 1, "dial tcp 127.0.0.1:1: connect: connection refused")
	}
	lines := strings.Split(strings.TrimSpace(out.b.String()), "\n")
	if len(lines) != burst {
		t.Fatalf("got %d lines for 50 calls within the interval; want %d", len(lines), burst)
	}
	for _, line := range lines {
		var rec struct {
			Level, Logger, Msg, Message string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line is not JSON: %q", line)
		}
		if rec.Level != "warn" || rec.Logger != "redis" || rec.Msg != "redis client" || !strings.Contains(rec.Message, "connection refused") {
			t.Errorf("line %q", line)
		}
	}
	New(nil).Printf(context.Background(), "discarded %d", 1) // must not panic
}
