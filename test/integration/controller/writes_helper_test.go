package controller

import (
	"net/http"
	"sync"

	"k8s.io/client-go/rest"
)

// writeLog records the write requests (every method but GET, HEAD and OPTIONS: lists and
// watches are GETs) that one client sends to the apiserver, as "METHOD path", failed ones
// included: an attempt the server refused is still a request the daemon made. Its reads
// (GETs: gets, lists, watches) it records apart, as "path?query".
type writeLog struct {
	mu     sync.Mutex
	writes []string
	reads  []string
}

// wrap returns a copy of cfg whose client records its writes here and names itself userAgent.
func (l *writeLog) wrap(cfg *rest.Config, userAgent string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &recordingTransport{next: rt, log: l} })
	return cfg
}

// list returns the writes recorded so far.
func (l *writeLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.writes...)
}

// readList returns the reads recorded so far.
func (l *writeLog) readList() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reads...)
}

type recordingTransport struct {
	next http.RoundTripper
	log  *writeLog
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet:
		t.log.mu.Lock()
		t.log.reads = append(t.log.reads, req.URL.Path+"?"+req.URL.RawQuery)
		t.log.mu.Unlock()
	case http.MethodHead, http.MethodOptions:
	default:
		t.log.mu.Lock()
		t.log.writes = append(t.log.writes, req.Method+" "+req.URL.Path)
		t.log.mu.Unlock()
	}
	return t.next.RoundTrip(req)
}
