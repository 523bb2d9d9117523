package secretmirror

import (
	"fmt"
	"slices"
	"sync"

	"github.com/go-logr/logr"
)

// logRecord is one line a test's manager logged.
type logRecord struct {
	level int
	msg   string
	err   error
	kv    map[string]string
}

// has reports whether the line carries key with value (compared as printed).
func (l logRecord) has(key, value string) bool {
	v, ok := l.kv[key]
	return ok && v == value
}

// logRecorder keeps every line of a manager's logger, at every verbosity, so a test can wait
// for a decision the mirror logs, or check that something was never logged.
type logRecorder struct {
	mu      sync.Mutex
	records []logRecord
}

// logger returns a logger that records into r and passes what inner enables on to inner.
func (r *logRecorder) logger(inner logr.Logger) logr.Logger {
	return logr.New(&recordingSink{rec: r, inner: inner.GetSink()})
}

func (r *logRecorder) add(level int, msg string, err error, kvs ...[]any) {
	rec := logRecord{level: level, msg: msg, err: err, kv: map[string]string{}}
	for _, kv := range kvs {
		for i := 0; i+1 < len(kv); i += 2 {
			rec.kv[fmt.Sprint(kv[i])] = fmt.Sprint(kv[i+1])
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
}

// find returns the lines that match, in the order they were logged.
func (r *logRecorder) find(match func(logRecord) bool) []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRecord
	for _, rec := range r.records {
		if match(rec) {
			out = append(out, rec)
		}
	}
	return out
}

// errors returns the lines logged as errors.
func (r *logRecorder) errors() []logRecord {
	return r.find(func(l logRecord) bool { return l.err != nil })
}

type recordingSink struct {
	rec   *logRecorder
	inner logr.LogSink
	kv    []any
}

func (s *recordingSink) Init(info logr.RuntimeInfo) { s.inner.Init(info) }

// Enabled is true at every level, so that V(1) and V(2) decisions are recorded.
func (s *recordingSink) Enabled(int) bool { return true }

// GetCallStackHelper lets the test log name the caller's line, not the sink's.
func (s *recordingSink) GetCallStackHelper() func() {
	if h, ok := s.inner.(logr.CallStackHelperLogSink); ok {
		return h.GetCallStackHelper()
	}
	return func() {}
}

func (s *recordingSink) Info(level int, msg string, kv ...any) {
	s.GetCallStackHelper()()
	s.rec.add(level, msg, nil, s.kv, kv)
	if s.inner.Enabled(level) {
		s.inner.Info(level, msg, kv...)
	}
}

func (s *recordingSink) Error(err error, msg string, kv ...any) {
	s.GetCallStackHelper()()
	s.rec.add(0, msg, err, s.kv, kv)
	s.inner.Error(err, msg, kv...)
}

func (s *recordingSink) WithValues(kv ...any) logr.LogSink {
	return &recordingSink{rec: s.rec, inner: s.inner.WithValues(kv...), kv: append(slices.Clone(s.kv), kv...)}
}

func (s *recordingSink) WithName(name string) logr.LogSink {
	return &recordingSink{rec: s.rec, inner: s.inner.WithName(name), kv: s.kv}
}
