package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// statusWatch sees every write of a domain from a given resourceVersion on, so a test can
// assert a status was never written, however briefly: a NotReady written and overwritten
// within a second is an event here, where a poll would miss it.
type statusWatch struct {
	mu      sync.Mutex
	events  int
	bad     []string
	lastErr error
	cancel  context.CancelFunc
	done    chan struct{}
}

// watchStatus watches cd from resourceVersion rv (its writes after rv), re-watching from the
// last event seen when the server ends a watch.
func watchStatus(t *testing.T, cd *cdv1beta1.ComputeDomain, rv string) *statusWatch {
	t.Helper()
	wc, err := client.NewWithWatch(testCluster.Config, client.Options{Scheme: testCluster.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &statusWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			wi, err := wc.Watch(ctx, &cdv1beta1.ComputeDomainList{}, client.InNamespace(cd.Namespace), &client.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("metadata.name", cd.Name),
				Raw:           &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true},
			})
			if err != nil {
				if ctx.Err() == nil {
					w.fail(err)
				}
				return
			}
			for ev := range wi.ResultChan() {
				if ev.Type == watch.Error {
					if ctx.Err() == nil { // not the watch ending as the test stops it
						w.fail(fmt.Errorf("watch error: %v", ev.Object))
					}
					wi.Stop()
					return
				}
				got, ok := ev.Object.(*cdv1beta1.ComputeDomain)
				if !ok {
					continue
				}
				rv = got.ResourceVersion
				if ev.Type == watch.Bookmark {
					continue
				}
				w.see(got)
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *statusWatch) see(cd *cdv1beta1.ComputeDomain) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	if cd.Status.Status != cdv1beta1.StatusReady {
		w.bad = append(w.bad, fmt.Sprintf("resourceVersion %s: status %q", cd.ResourceVersion, cd.Status.Status))
	}
}

func (w *statusWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastErr = err
}

func (w *statusWatch) stop() {
	w.cancel()
	<-w.done
}

// checkReadyThroughout stops the watch and fails the test if any write it saw left the domain
// not Ready, or the watch itself failed (then it may have missed writes).
func (w *statusWatch) checkReadyThroughout(t *testing.T, what string) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("%s: %d writes of the domain watched", what, w.events)
	if w.lastErr != nil {
		t.Errorf("%s: the watch of the domain failed, writes may be missed: %v", what, w.lastErr)
	}
	if len(w.bad) > 0 {
		t.Errorf("%s: the domain was written not Ready %d times: %v", what, len(w.bad), w.bad)
	}
}
