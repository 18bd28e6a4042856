package logging

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Environment variables read by this package (and nowhere else).
const (
	EnvLevel  = "MKERNEL_LOG_LEVEL"  // debug, info, warn, error (default warn)
	EnvFormat = "MKERNEL_LOG_FORMAT" // console (default) or json
)

var (
	mu     sync.Mutex
	level  = zap.NewAtomicLevelAt(zapcore.WarnLevel)
	root   *zap.Logger
	format = "console"
)

// ParseLevel maps a level name to a zap level. It accepts the Python names
// too ("warning", "critical") so both sides can share one variable.
func ParseLevel(name string) (zapcore.Level, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "debug":
		return zapcore.DebugLevel, nil
	case "info", "":
		return zapcore.InfoLevel, nil
	case "warn", "warning":
		return zapcore.WarnLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	case "critical", "fatal", "dpanic":
		// Fatal would exit the host process (Python); map it to error+.
		return zapcore.DPanicLevel, nil
	}
	return 0, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", name)
}

func encoderConfig() zapcore.EncoderConfig {
	cfg := zap.NewProductionEncoderConfig()
	cfg.TimeKey = "ts"
	cfg.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.EncodeDuration = zapcore.StringDurationEncoder
	cfg.CallerKey = "" // callers differ between Go and Python; keep the format identical
	cfg.StacktraceKey = ""
	return cfg
}

func build(fmtName string) (*zap.Logger, error) {
	var enc zapcore.Encoder
	switch fmtName {
	case "json":
		enc = zapcore.NewJSONEncoder(encoderConfig())
	case "console", "":
		enc = zapcore.NewConsoleEncoder(encoderConfig())
	default:
		return nil, fmt.Errorf("unknown log format %q (want console or json)", fmtName)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(os.Stderr), level)
	// DPanic must not panic inside a host process: zap only panics in development mode.
	return zap.New(core).Named("mkernel"), nil
}

// L returns the process logger, creating it from the environment on first use.
// A bad MKERNEL_LOG_LEVEL or MKERNEL_LOG_FORMAT falls back to the default and
// says so once.
func L() *zap.Logger {
	mu.Lock()
	defer mu.Unlock()
	if root != nil {
		return root
	}
	var warnings []string
	if v, ok := os.LookupEnv(EnvLevel); ok {
		if lv, err := ParseLevel(v); err == nil {
			level.SetLevel(lv)
		} else {
			warnings = append(warnings, fmt.Sprintf("%s: %v", EnvLevel, err))
		}
	}
	if v, ok := os.LookupEnv(EnvFormat); ok {
		format = strings.ToLower(strings.TrimSpace(v))
	}
	l, err := build(format)
	if err != nil {
		warnings = append(warnings, fmt.Sprintf("%s: %v", EnvFormat, err))
		format = "console"
		l, _ = build(format)
	}
	root = l
	for _, w := range warnings {
		root.Warn("ignoring bad logging setting", zap.String("reason", w))
	}
	return root
}

// Named returns a child logger ("mkernel.<name>").
func Named(name string) *zap.Logger { return L().Named(name) }

// SetLevel changes the level of every logger at run time.
func SetLevel(name string) error {
	lv, err := ParseLevel(name)
	if err != nil {
		return err
	}
	L()
	level.SetLevel(lv)
	return nil
}

// Level returns the current level's name.
func Level() string {
	L()
	return level.Level().String()
}

// SetFormat switches between "console" and "json" at run time.
func SetFormat(name string) error {
	name = strings.ToLower(strings.TrimSpace(name))
	l, err := build(name)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if root != nil {
		_ = root.Sync()
	}
	root, format = l, name
	return nil
}

// Format returns the current format's name.
func Format() string {
	L()
	mu.Lock()
	defer mu.Unlock()
	return format
}

// Emit writes one record on behalf of another language (Python): logger is
// its dotted name below "mkernel", fields are flattened key/value pairs.
func Emit(levelName, logger, msg string, kv ...string) error {
	lv, err := ParseLevel(levelName)
	if err != nil {
		return err
	}
	l := L()
	if logger = strings.TrimPrefix(strings.TrimPrefix(logger, "mkernel"), "."); logger != "" {
		l = l.Named(logger)
	}
	if ce := l.Check(lv, msg); ce != nil {
		fields := make([]zap.Field, 0, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			fields = append(fields, zap.String(kv[i], kv[i+1]))
		}
		ce.Write(fields...)
	}
	return nil
}

// Enabled says whether a record at this level would be written.
func Enabled(levelName string) bool {
	lv, err := ParseLevel(levelName)
	if err != nil {
		return false
	}
	L()
	return level.Enabled(lv)
}
