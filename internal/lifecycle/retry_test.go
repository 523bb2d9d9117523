package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
	"k8s.io/apimachinery/pkg/util/wait"
)

func response(code int, body string) *http.Response {
	return &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
}

func TestTransientFailure(t *testing.T) {
	status := func(code int, msg string) string {
		return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d,"message":%q}`, code, msg)
	}
	cases := map[string]struct {
		resp      *http.Response
		err       error
		transient bool
		why       string
	}{
		"200":                    {resp: response(200, "{}")},
		"403 Forbidden":          {resp: response(403, status(403, "forbidden"))},
		"404 NotFound":           {resp: response(404, status(404, "not found"))},
		"409 Conflict":           {resp: response(409, status(409, "conflict"))},
		"422 Invalid":            {resp: response(422, status(422, "invalid"))},
		"429":                    {resp: response(429, status(429, "too many requests")), transient: true, why: "429 Too Many Requests: too many requests"},
		"500 leader changed":     {resp: response(500, status(500, "etcdserver: leader changed")), transient: true, why: "500 Internal Server Error: etcdserver: leader changed"},
		"503":                    {resp: response(503, status(503, "unavailable")), transient: true, why: "503 Service Unavailable: unavailable"},
		"504 without a body":     {resp: response(504, "not json"), transient: true, why: "504 Gateway Timeout"},
		"connection refused":     {err: &url.Error{Op: "Get", URL: "https://x", Err: syscall.ECONNREFUSED}, transient: true},
		"connection reset":       {err: &url.Error{Op: "Get", URL: "https://x", Err: syscall.ECONNRESET}, transient: true},
		"EOF":                    {err: &url.Error{Op: "Get", URL: "https://x", Err: io.EOF}, transient: true},
		"an HTTP/2 stream reset": {err: &url.Error{Op: "Get", URL: "https://x", Err: http2.StreamError{StreamID: 3, Code: http2.ErrCodeInternal}}, transient: true},
		"canceled":               {err: &url.Error{Op: "Get", URL: "https://x", Err: context.Canceled}},
		"a certificate error":    {err: &url.Error{Op: "Get", URL: "https://x", Err: errors.New("x509: certificate signed by unknown authority")}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			why, transient := TransientFailure(context.Background(), tc.resp, tc.err)
			if transient != tc.transient {
				t.Fatalf("transient %v, want %v (%s)", transient, tc.transient, why)
			}
			if tc.why != "" && why != tc.why {
				t.Errorf("why %q, want %q", why, tc.why)
			}
			if tc.resp != nil {
				// The body is still there for the caller.
				if b, _ := io.ReadAll(tc.resp.Body); len(b) == 0 {
					t.Errorf("the response body was consumed")
				}
			}
		})
	}
}

// script is a RoundTripper answering from a list, recording the bodies it was sent.
type script struct {
	answers []func() (*http.Response, error)
	bodies  []string
}

func (s *script) RoundTrip(req *http.Request) (*http.Response, error) {
	body := ""
	if req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		body = string(b)
	}
	s.bodies = append(s.bodies, body)
	i := len(s.bodies) - 1
	if i >= len(s.answers) {
		i = len(s.answers) - 1
	}
	return s.answers[i]()
}

// The delays between attempts: 250ms doubling up to 5s, each up to 20% longer.
func TestRetryBackoff(t *testing.T) {
	b := retryBackoff
	base := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, d := range base {
		if got := b.Step(); got < d || got > d+d/5 {
			t.Errorf("delay %d: %s, want %s to %s", i+1, got, d, d+d/5)
		}
	}
}

func TestRetryTransport(t *testing.T) {
	defer func(b wait.Backoff) { retryBackoff = b }(retryBackoff)
	retryBackoff.Duration, retryBackoff.Cap = time.Millisecond, 2*time.Millisecond
	unavailable := func() (*http.Response, error) { return response(503, `{"message":"down"}`), nil }
	refused := func() (*http.Response, error) {
		return nil, &url.Error{Op: "Post", URL: "x", Err: syscall.ECONNREFUSED}
	}
	ok := func() (*http.Response, error) { return response(201, "{}"), nil }
	forbidden := func() (*http.Response, error) { return response(403, "{}"), nil }
	reset := func() (*http.Response, error) {
		return nil, &url.Error{Op: "Post", URL: "x", Err: syscall.ECONNRESET}
	}
	timedOut := func() (*http.Response, error) { return response(504, `{"message":"timeout"}`), nil }
	busy := func() (*http.Response, error) {
		r := response(500, `{"message":"busy"}`)
		r.Header.Set("Retry-After", "1")
		return r, nil
	}
	tooMany := func() (*http.Response, error) { return response(429, `{"message":"slow down"}`), nil }
	cases := map[string]struct {
		method    string // default POST
		jsonPatch bool   // the body is a JSON patch (otherwise a merge patch for PATCH)
		answers   []func() (*http.Response, error)
		budget    time.Duration
		code      int // 0: an error
		sent      int
		retries   int
	}{
		"succeeds after transient failures": {answers: []func() (*http.Response, error){unavailable, refused, ok}, budget: time.Minute, code: 201, sent: 3, retries: 2},
		"a permanent failure at once":       {answers: []func() (*http.Response, error){forbidden, ok}, budget: time.Minute, code: 403, sent: 1},
		"no budget left: the last failure":  {answers: []func() (*http.Response, error){unavailable}, budget: 0, code: 503, sent: 1},
		// A write that may have been applied is not sent again: a create after a reset
		// connection, or after a timeout inside the apiserver.
		"a create whose connection was reset: not sent again": {answers: []func() (*http.Response, error){reset, ok}, budget: time.Minute, code: 0, sent: 1},
		"a create that timed out: not sent again":             {answers: []func() (*http.Response, error){timedOut, ok}, budget: time.Minute, code: 504, sent: 1},
		"a create refused by priority and fairness: retried":  {answers: []func() (*http.Response, error){tooMany, ok}, budget: time.Minute, code: 201, sent: 2, retries: 1},
		"a create answered 500 with Retry-After: retried":     {answers: []func() (*http.Response, error){busy, ok}, budget: time.Minute, code: 201, sent: 2, retries: 1},
		"a read whose connection was reset: retried":          {method: http.MethodGet, answers: []func() (*http.Response, error){reset, timedOut, ok}, budget: time.Minute, code: 201, sent: 3, retries: 2},
		"an update whose connection was reset: retried":       {method: http.MethodPut, answers: []func() (*http.Response, error){reset, ok}, budget: time.Minute, code: 201, sent: 2, retries: 1},
		"a merge patch that timed out: retried":               {method: http.MethodPatch, answers: []func() (*http.Response, error){timedOut, ok}, budget: time.Minute, code: 201, sent: 2, retries: 1},
		"a JSON patch that timed out: not sent again":         {method: http.MethodPatch, jsonPatch: true, answers: []func() (*http.Response, error){timedOut, ok}, budget: time.Minute, code: 504, sent: 1},
		"a delete whose connection was reset: retried":        {method: http.MethodDelete, answers: []func() (*http.Response, error){reset, ok}, budget: time.Minute, code: 201, sent: 2, retries: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := &script{answers: tc.answers}
			var out strings.Builder
			rt := &retryTransport{next: s, out: &out, budget: tc.budget}
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequestWithContext(context.Background(), method, "https://apiserver/api/v1/namespaces", strings.NewReader(`{"kind":"Namespace"}`))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.jsonPatch:
				req.Header.Set("Content-Type", "application/json-patch+json")
			case method == http.MethodPatch:
				req.Header.Set("Content-Type", "application/merge-patch+json")
			}
			resp, err := rt.RoundTrip(req)
			switch {
			case tc.code == 0 && err == nil:
				t.Fatalf("no error, status %d", resp.StatusCode)
			case tc.code != 0 && err != nil:
				t.Fatalf("error %v, want status %d", err, tc.code)
			case tc.code != 0 && resp.StatusCode != tc.code:
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
			want := make([]string, tc.sent)
			for i := range want {
				want[i] = `{"kind":"Namespace"}`
			}
			if diff := cmp.Diff(want, s.bodies); diff != "" {
				t.Errorf("requests sent (-want +got), each with the whole body:\n%s", diff)
			}
			if got := strings.Count(out.String(), "  retrying after: "); got != tc.retries {
				t.Errorf("%d retries reported, want %d:\n%s", got, tc.retries, out.String())
			}
			if tc.retries > 0 && method == http.MethodPost && !strings.Contains(out.String(), "retrying after: ") {
				t.Errorf("the retry does not say why:\n%s", out.String())
			}
			if name == "succeeds after transient failures" && !strings.Contains(out.String(), "retrying after: 503 Service Unavailable: down (POST /api/v1/namespaces)") {
				t.Errorf("the retry does not say why:\n%s", out.String())
			}
		})
	}

	// The context ending stops the retries.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://apiserver/api", nil)
	rt := &retryTransport{next: &script{answers: []func() (*http.Response, error){refused}}, out: io.Discard, budget: time.Minute}
	if _, err := rt.RoundTrip(req); err == nil {
		t.Errorf("a canceled request: no error")
	}
}
