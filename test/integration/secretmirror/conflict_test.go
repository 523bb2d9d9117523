package secretmirror

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/secretmirror"
	"cdplane/internal/metrics"
)

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
	c := w.e.c
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
		if err := w.e.c.Get(ctx, w.key, cur); err != nil {
			continue
		}
		delete(cur.Labels, secretmirror.MirroredFromLabel)
		delete(cur.Labels, cdv1beta1.ControlPlaneLabel)
		cur.Labels["app"] = "taken-over"
		cur.Data = map[string][]byte{"token": []byte("foreign")}
		if err := w.e.c.Update(ctx, cur); err == nil {
			return cur.ResourceVersion
		}
	}
	return ""
}

// TestConcurrentWriterConflictsConverge: while another writer keeps updating a copy, the
// mirror's writes meet conflicts (counted by the mirror and seen by the apiserver as 409s), each
// retried from a fresh read; once the writer stops, the copy equals the source. When the writer
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
	e.start()
	e.waitCopy(t1, "creds", src)

	api409 := map[string]string{"resource": "secrets", "code": "409"}
	apiBefore := e.apiMetric("apiserver_request_total", api409)
	before := e.metric(metrics.SecretMirrorWriteConflictsName)
	started := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	w := e.startWriter(ctx, t1, "creds")
	e.eventually(60*time.Second, "the mirror meets 3 conflicts", func() (bool, error) {
		return e.metric(metrics.SecretMirrorWriteConflictsName)-before >= 3, nil
	})
	cancel()
	<-w.done
	e.waitCopy(t1, "creds", src)
	conflicts := e.metric(metrics.SecretMirrorWriteConflictsName) - before
	apiConflicts := e.apiMetric("apiserver_request_total", api409) - apiBefore
	t.Logf("writer made %d writes; the mirror met %.0f conflicts (apiserver answered %.0f 409s on secrets) and converged in %s",
		w.writes, conflicts, apiConflicts, time.Since(started).Round(time.Millisecond))
	if apiConflicts < conflicts {
		t.Errorf("the mirror counted %.0f conflicts but the apiserver answered only %.0f 409s", conflicts, apiConflicts)
	}

	// Fight again, then take the Secret over mid-fight.
	before = e.metric(metrics.SecretMirrorWriteConflictsName)
	foreignBefore := e.metric(metrics.SecretMirrorForeignTargetsName)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	w = e.startWriter(ctx, t1, "creds")
	e.eventually(60*time.Second, "the mirror meets a conflict again", func() (bool, error) {
		return e.metric(metrics.SecretMirrorWriteConflictsName) > before, nil
	})
	close(w.takeover)
	rv := <-w.done
	if rv == "" {
		t.Fatal("the writer could not take the Secret over")
	}
	e.eventually(30*time.Second, "the taken-over Secret reported as foreign", func() (bool, error) {
		return e.metric(metrics.SecretMirrorForeignTargetsName) > foreignBefore, nil
	})
	foreign := map[string]string{"token": "foreign"}
	e.assertUntouched(t1, "creds", rv, foreign)

	foreignBefore = e.metric(metrics.SecretMirrorForeignTargetsName)
	e.updateSecret(e.srcNS, "creds", func(s *corev1.Secret) { s.Data["token"] = []byte("source-2") })
	e.eventually(30*time.Second, "the source change refused on the foreign Secret", func() (bool, error) {
		return e.metric(metrics.SecretMirrorForeignTargetsName) > foreignBefore, nil
	})
	e.assertUntouched(t1, "creds", rv, foreign)
}
