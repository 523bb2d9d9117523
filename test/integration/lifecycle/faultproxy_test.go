package lifecycle

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// fault is how the proxy fails a request, as an overloaded or restarting apiserver, or a
// network, would.
type fault string

const (
	noFault       fault = ""
	unavailable   fault = "503"   // ServiceUnavailable
	tooMany       fault = "429"   // TooManyRequests (priority and fairness)
	leaderChanged fault = "500"   // InternalError, as etcd changing leader shows
	reset         fault = "reset" // the connection is cut before any answer
)

// faultProxy stands between the cdplane CLI and the test apiserver, forwarding every request as
// a cluster administrator, and fails the requests its rule picks. A request's kind is its verb
// and resource ("POST rolebindings", "WATCH secrets", "GET /apis" for discovery); the rule sees
// the kind and how many requests of that kind came before (0 for the first).
type faultProxy struct {
	srv  *httptest.Server
	mu   sync.Mutex
	rule func(kind string, n int) fault
	seen map[string]int
	// injected counts the faults made, per fault and per kind.
	injected map[fault]int
	kinds    map[string]int
}

func newFaultProxy(t *testing.T, rule func(kind string, n int) fault) *faultProxy {
	t.Helper()
	target, err := url.Parse(testCluster.Config.Host)
	must(t, err)
	transport, err := rest.TransportFor(testCluster.Config)
	must(t, err)
	p := &faultProxy{rule: rule, seen: map[string]int{}, injected: map[fault]int{}, kinds: map[string]int{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport:     transport,
		FlushInterval: -1,
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.fail(w, r) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// setRule replaces the rule.
func (p *faultProxy) setRule(rule func(kind string, n int) fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rule = rule
}

// forget starts counting the requests of each kind afresh.
func (p *faultProxy) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = map[string]int{}
}

// kubeconfig writes a kubeconfig reaching the apiserver through the proxy.
func (p *faultProxy) kubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "proxy.kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: proxy, cluster: {server: %q}}]
users: [{name: admin, user: {}}]
contexts: [{name: proxy, context: {cluster: proxy, user: admin}}]
current-context: proxy
`, p.srv.URL)
	must(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// fail answers r with the fault the rule picks, and says whether it did.
func (p *faultProxy) fail(w http.ResponseWriter, r *http.Request) bool {
	kind := requestKind(r)
	p.mu.Lock()
	n := p.seen[kind]
	p.seen[kind]++
	f := p.rule(kind, n)
	if f != noFault {
		p.injected[f]++
		p.kinds[kind]++
	}
	p.mu.Unlock()
	status := func(code int, reason, message string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message,
		})
	}
	switch f {
	case unavailable:
		status(http.StatusServiceUnavailable, "ServiceUnavailable", "injected: the server is currently unable to handle the request")
	case tooMany:
		status(http.StatusTooManyRequests, "TooManyRequests", "injected: too many requests, please try again later")
	case leaderChanged:
		status(http.StatusInternalServerError, "InternalError", "injected: etcdserver: leader changed")
	case reset:
		panic(http.ErrAbortHandler) // the server closes the connection without an answer
	default:
		return false
	}
	return true
}

// sent is how many requests of kind reached the proxy, failed or not.
func (p *faultProxy) sent(kind string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[kind]
}

// injectedKinds lists the kinds of request that were failed at least once.
func (p *faultProxy) injectedKinds() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.kinds))
	for k := range p.kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (p *faultProxy) injectedCount(f fault) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.injected[f]
}

// requestKind is a request's verb and resource: "GET namespaces", "PATCH nodes",
// "WATCH secrets", "PUT namespaces/finalize"; other paths (discovery) as "GET /apis/...".
func requestKind(r *http.Request) string {
	verb := r.Method
	if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
		verb = "WATCH"
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	}
	if len(rest) == 0 {
		return verb + " " + r.URL.Path
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	kind := rest[0]
	if len(rest) >= 3 {
		kind += "/" + rest[2]
	}
	return verb + " " + kind
}
