// Package redislog routes go-redis's own log lines (pool dial failures and
// the like, which it otherwise prints as plain text to stderr) into the
// gateway's zap logger, so every line the process writes is JSON. Lines are
// rate limited: while Redis is down go-redis would log on every command.
package redislog

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Logger adapts a zap logger to go-redis's logging interface. Build it with
// New; the zero value discards every line.
type Logger struct {
	log *zap.Logger
}

// The rate limit: at most burst lines per interval; the rest of the
// interval's lines are dropped (zap's sampler counts them).
const (
	interval = 10 * time.Second
	burst    = 5
)

// New returns a Logger writing to log at warn level under the name
// "redis", at most 5 lines every 10 seconds. log nil discards.
func New(log *zap.Logger) *Logger {
	if log == nil {
		return &Logger{}
	}
	sampled := log.Named("redis").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, interval, burst, 0)
	}))
	return &Logger{log: sampled}
}

// Printf implements go-redis's logging interface.
func (l *Logger) Printf(_ context.Context, format string, v ...any) {
	if l.log == nil {
		return
	}
	if ce := l.log.Check(zapcore.WarnLevel, "redis client"); ce != nil {
		ce.Write(zap.String("message", fmt.Sprintf(format, v...)))
	}
}

// Install makes l go-redis's process-wide logger.
func Install(l *Logger) { redis.SetLogger(l) }
