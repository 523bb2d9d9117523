package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// retryBackoff spaces the attempts of a request that failed transiently: 250ms doubling up to
// 5s, each delay up to 20% longer (jitter).
var retryBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: 5 * time.Second, Steps: math.MaxInt32}

// WithCommandRates sets the client rates every cdplane command talks to a cluster with (cfg
// changed in place, and returned): above client-go's default of 5 a second, which a command that
// lists and writes a plane's objects, or a debug bundle reading every domain's, would spend most
// of its time waiting for.
func WithCommandRates(cfg *rest.Config) *rest.Config {
	cfg.QPS, cfg.Burst = 50, 100
	return cfg
}

// WithRetries returns a copy of cfg whose requests are retried, with backoff, while they fail
// transiently (TransientFailure) and budget allows (counted from each request's first attempt,
// and never past its context's deadline). Each retry prints "retrying after: <error>" to out.
// A request that fails otherwise, or whose body cannot be sent again, returns at once, and so
// does a request that is not idempotent (a create, a JSON patch) whose failure leaves open
// whether the apiserver applied it (mayHaveBeenApplied): sent again, it could apply twice.
//
// Every request of every lifecycle command (Helm's included) goes through it, so a 503 from
// an apiserver restarting, a 429 from priority and fairness or a reset connection does not
// stop an install halfway. What does not pass this way — Forbidden, NotFound, Invalid,
// Conflict — the commands handle themselves (a Conflict by reading again).
func WithRetries(cfg *rest.Config, out io.Writer, budget time.Duration) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	w := syncWriter(out)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return &retryTransport{next: next, out: w, budget: budget}
	})
	return cfg
}

type retryTransport struct {
	next   http.RoundTripper
	out    io.Writer
	budget time.Duration
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	deadline := time.Now().Add(t.budget)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	backoff := retryBackoff
	for {
		resp, err := t.next.RoundTrip(req)
		why, transient := TransientFailure(ctx, resp, err)
		if !transient || !idempotent(req) && mayHaveBeenApplied(resp, err) {
			return resp, err
		}
		pause := backoff.Step()
		if ra := retryAfter(resp); ra > pause {
			pause = min(ra, backoff.Cap)
		}
		again, rerr := rewind(req)
		if rerr != nil || time.Now().Add(pause).After(deadline) {
			return resp, err
		}
		if resp != nil {
			_ = resp.Body.Close()
		}
		fmt.Fprintf(t.out, "  retrying after: %s (%s %s)\n", why, req.Method, req.URL.Path)
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("%s %s: %w (last failure: %s)", req.Method, req.URL.Path, ctx.Err(), why)
		case <-timer.C:
		}
		req = again
	}
}

// rewind returns the request to send again: with a fresh body, or as it is when it has none.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	if req.GetBody == nil {
		return nil, errors.New("the request body cannot be sent again")
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	again := req.Clone(req.Context())
	again.Body = body
	return again, nil
}

// TransientFailure says whether a response (or a transport error) is a failure that the same
// request may not meet again: a connection refused, reset or cut short; the apiserver
// answering 429 (too many requests), 500 (an internal error or a server timeout, as when etcd
// changes leader), 502, 503 (unavailable) or 504 (timeout). It describes the failure. The
// context ending is not transient. An error response's body is read and put back.
func TransientFailure(ctx context.Context, resp *http.Response, err error) (string, bool) {
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return "", false
		}
		var nerr net.Error
		var serr http2.StreamError
		transient := utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
			utilnet.IsHTTP2ConnectionLost(err) || errors.As(err, &serr) ||
			(errors.As(err, &nerr) && nerr.Timeout())
		return err.Error(), transient
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
	default:
		return "", false
	}
	why := fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	if resp.Body == nil {
		return why, true
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return why, true
	}
	status := &metav1.Status{}
	if jerr := json.Unmarshal(body, status); jerr == nil && status.Message != "" {
		why += ": " + status.Message
	}
	return why, true
}

// idempotent says whether sending a request twice has the effect of sending it once: reads;
// an update (PUT: the same object again, or a Conflict when it carries the resourceVersion the
// first one changed); a delete (a NotFound the second time); a merge, strategic-merge or apply
// patch (the same fields set again). Not a create (POST: a second object, or AlreadyExists in
// place of success) nor a JSON patch (an "add" to a list adds twice).
func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
		return true
	case http.MethodPatch:
		return req.Header.Get("Content-Type") != "application/json-patch+json"
	}
	return false
}

// mayHaveBeenApplied says whether a transient failure leaves open that the apiserver applied
// the request: a connection that broke after the request went out, or a 500, 502 or 504 (a
// timeout inside the apiserver or in front of it) without Retry-After. Not for a connection
// that was never made, nor for the apiserver refusing to take the request (429 from priority
// and fairness, 503 while it starts or stops, any answer with Retry-After).
func mayHaveBeenApplied(resp *http.Response, err error) bool {
	if err != nil {
		if utilnet.IsConnectionRefused(err) {
			return false // never reached the apiserver
		}
		var op *net.OpError
		return !errors.As(err, &op) || op.Op != "dial"
	}
	switch resp.StatusCode {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return resp.Header.Get("Retry-After") == ""
	}
	return false
}

// retryAfter is the delay a response's Retry-After header asks for (seconds), 0 without one.
func retryAfter(resp *http.Response) time.Duration {
	if resp == nil {
		return 0
	}
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || s <= 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}

// lockedWriter serialises writes from concurrent requests.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func syncWriter(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	if _, ok := w.(*lockedWriter); ok {
		return w
	}
	return &lockedWriter{w: w}
}
