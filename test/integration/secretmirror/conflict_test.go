package secretmirror

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/secretmirror"
	"cdplane/internal/metrics"
)

// secretCall is one request the mirror's own client sent on a Secret: its method, the Secret's
// namespace and name (empty for a create or a list), the reconcile that sent it (empty outside
// one) and the status code answered (0 when no answer came).
type secretCall struct {
	method, namespace, name string
	reconcile               types.UID
	code                    int
}

// secretCalls records the requests on Secrets that one client sends, in the order their answers
// came. The mirror works one request at a time, so within one reconcile that is the order sent.
type secretCalls struct {
	mu    sync.Mutex
	calls []secretCall
}

// wrap returns a copy of cfg whose client records its requests on Secrets here.
func (l *secretCalls) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &secretCallsTransport{next: rt, log: l} })
	return cfg
}

// list returns the requests recorded so far.
func (l *secretCalls) list() []secretCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]secretCall(nil), l.calls...)
}

// conflicts counts the recorded requests answered 409 Conflict: a write that lost to another
// writer's, or a create that found the name taken, each of which the mirror counts.
func (l *secretCalls) conflicts() int {
	n := 0
	for _, c := range l.list() {
		if c.code == http.StatusConflict {
			n++
		}
	}
	return n
}

// retried counts the 409s on the Secret ns/name after which the same reconcile read that Secret
// again and then wrote it again: a conflict retried from a fresh read within the pass that met it.
func (l *secretCalls) retried(ns, name string) int {
	calls := l.list()
	n := 0
	for i, c := range calls {
		if c.code != http.StatusConflict || c.namespace != ns || (c.name != name && c.name != "") || c.reconcile == "" {
			continue
		}
		read := false
		for _, next := range calls[i+1:] {
			if next.reconcile != c.reconcile || next.namespace != ns {
				continue
			}
			if next.method == http.MethodGet && next.name == name {
				read = true
			} else if read && next.method != http.MethodGet && (next.name == name || next.name == "") {
				n++
				break
			}
		}
	}
	return n
}

type secretCallsTransport struct {
	next http.RoundTripper
	log  *secretCalls
}

func (t *secretCallsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	ns, name, ok := secretPath(req.URL.Path)
	if !ok {
		return resp, err
	}
	call := secretCall{method: req.Method, namespace: ns, name: name, reconcile: controller.ReconcileIDFromContext(req.Context())}
	if err == nil {
		call.code = resp.StatusCode
	}
	t.log.mu.Lock()
	t.log.calls = append(t.log.calls, call)
	t.log.mu.Unlock()
	return resp, err
}

// secretPath splits /api/v1/namespaces/<ns>/secrets[/<name>] into namespace and name.
func secretPath(path string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(path, "/api/v1/namespaces/")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 || parts[1] != "secrets" || len(parts) > 3 {
		return "", "", false
	}
	if len(parts) == 3 {
		name = parts[2]
	}
	return parts[0], name, true
}

// writer is a concurrent writer of one copy: it keeps overwriting the copy's data with the
// resourceVersion of its own last write, so that the mirror's writes, made from its own fresh
// reads, keep meeting conflicts. Told to take over, it makes a last write that removes the
// plane's marker, turning the copy into a foreign Secret.
type writer struct {
	e        *env
	key      client.ObjectKey
	takeover chan struct{}
	done     chan string // the resourceVersion of the takeover write, or "" when cancelled
	writes   int
}

func (e *env) startWriter(ctx context.Context, ns, name string) *writer {
	w := &writer{e: e, key: client.ObjectKey{Namespace: ns, Name: name}, takeover: make(chan struct{}), done: make(chan string, 1)}
	go func() { w.done <- w.run(ctx) }()
	return w
}

func (w *writer) run(ctx context.Context) string {
	c := w.e.C
	cur := &corev1.Secret{}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return ""
		case <-w.takeover:
			return w.takeOver(ctx)
		default:
		}
		if cur.ResourceVersion == "" {
			if err := c.Get(ctx, w.key, cur); err != nil {
				continue
			}
		}
		cur.Data = map[string][]byte{"token": []byte(fmt.Sprintf("writer-%d", i))}
		err := c.Update(ctx, cur)
		switch {
		case err == nil:
			w.writes++
		case apierrors.IsConflict(err):
			cur.ResourceVersion = "" // the mirror wrote in between: read again
		}
	}
}

// takeOver removes the marker and writes foreign data, retrying its own conflicts.
func (w *writer) takeOver(ctx context.Context) string {
	for ctx.Err() == nil {
		cur := &corev1.Secret{}
		if err := w.e.C.Get(ctx, w.key, cur); err != nil {
			continue
		}
		delete(cur.Labels, secretmirror.MirroredFromLabel)
		delete(cur.Labels, cdv1beta1.ControlPlaneLabel)
		cur.Labels["app"] = "taken-over"
		cur.Data = map[string][]byte{"token": []byte("foreign")}
		if err := w.e.C.Update(ctx, cur); err == nil {
			return cur.ResourceVersion
		}
	}
	return ""
}

// TestConcurrentWriterConflictsConverge: while another writer keeps updating a copy, the
// mirror's writes meet conflicts, each counted by the mirror exactly as its own client received
// them (409s, read on the wire of the client the mirror was given) and retried within the same
// pass from a fresh read; once the writer stops, the copy equals the source. When the writer
// instead ends by removing the plane's marker in the middle of the fight, the mirror's next
// attempt re-reads, sees a Secret it does not own, and leaves it intact (same resourceVersion)
// and reported, then and after a later source change. Copies are not watched: a short
// ResyncInterval makes the mirror come back to the copy the writer keeps changing.
func TestConcurrentWriterConflictsConverge(t *testing.T) {
	t.Parallel()
	e := newPlane(t)
	e.opts.ResyncInterval = 200 * time.Millisecond
	t1 := e.target("sm-fight-")
	src := map[string]string{"token": "source"}
	e.createSource("creds", src)
	wire := &secretCalls{}
	e.startAs(wire.wrap(testCluster.Config))
	e.waitCopy(t1, "creds", src)

	// Nobody but the mirror writes the copy now: every 409 from here on is one it met.
	wireStart := wire.conflicts()
	start := e.metric(metrics.SecretMirrorWriteConflictsName)
	started := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	w := e.startWriter(ctx, t1, "creds")
	e.Eventually(60*time.Second, "the mirror meets 3 conflicts", func() (bool, error) {
		return wire.conflicts()-wireStart >= 3, nil
	})
	cancel()
	<-w.done
	// The copy equal to the source again is the mirror's write after the writer's last one; the
	// mirror works one request at a time, so every conflict it met before is counted by now.
	e.waitCopy(t1, "creds", src)
	counted := e.metric(metrics.SecretMirrorWriteConflictsName) - start
	received := wire.conflicts() - wireStart
	retried := wire.retried(t1, "creds")
	t.Logf("writer made %d writes; the mirror's client received %d 409s on Secrets, the mirror counted %.0f, retried %d in the same pass, and converged in %s",
		w.writes, received, counted, retried, time.Since(started).Round(time.Millisecond))
	if counted != float64(received) {
		t.Errorf("the mirror counted %.0f conflicts, but its client received %d 409s on Secrets", counted, received)
	}
	if retried == 0 {
		t.Errorf("none of the %d conflicts the mirror met was retried from a fresh read in the pass that met it", received)
	}

	// Fight again, then take the Secret over mid-fight.
	before := wire.conflicts()
	foreignBefore := e.metric(metrics.SecretMirrorForeignTargetsName)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	w = e.startWriter(ctx, t1, "creds")
	e.Eventually(60*time.Second, "the mirror meets a conflict again", func() (bool, error) {
		return wire.conflicts() > before, nil
	})
	close(w.takeover)
	rv := <-w.done
	if rv == "" {
		t.Fatal("the writer could not take the Secret over")
	}
	e.Eventually(30*time.Second, "the taken-over Secret reported as foreign", func() (bool, error) {
		return e.metric(metrics.SecretMirrorForeignTargetsName) > foreignBefore, nil
	})
	foreign := map[string]string{"token": "foreign"}
	e.assertUntouched(t1, "creds", rv, foreign)

	foreignBefore = e.metric(metrics.SecretMirrorForeignTargetsName)
	e.updateSecret(e.srcNS, "creds", func(s *corev1.Secret) { s.Data["token"] = []byte("source-2") })
	e.Eventually(30*time.Second, "the source change refused on the foreign Secret", func() (bool, error) {
		return e.metric(metrics.SecretMirrorForeignTargetsName) > foreignBefore, nil
	})
	e.assertUntouched(t1, "creds", rv, foreign)
	// Once it saw the Secret was not its own the mirror stopped writing it: whatever it met
	// before, it has counted, exactly as its client received it.
	if counted, received := e.metric(metrics.SecretMirrorWriteConflictsName)-start, wire.conflicts()-wireStart; counted != float64(received) {
		t.Errorf("over the whole test the mirror counted %.0f conflicts, but its client received %d 409s on Secrets", counted, received)
	}
}
