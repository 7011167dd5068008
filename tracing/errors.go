package tracing

import (
	"time"

	"go.opentelemetry.io/otel"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// LogErrors routes the OpenTelemetry SDK's errors (a failed export, a full
// queue), which it otherwise prints as plain text to stderr, into log at
// warn level under the name "tracing", at most 5 lines every 10 seconds:
// a collector that is down would log on every batch. The handler is
// process-global, like the SDK's; cmd installs it once. log nil discards.
func LogErrors(log *zap.Logger) {
	if log == nil {
		log = zap.NewNop()
	}
	sampled := log.Named("tracing").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, 10*time.Second, 5, 0)
	}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		sampled.Warn("opentelemetry", zap.Error(err))
	}))
}
