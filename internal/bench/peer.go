package bench

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemon"
)

func newMapper(cfg *rest.Config) (meta.RESTMapper, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return apiutil.NewDynamicRESTMapper(cfg, httpClient)
}

// entryStore is where a peer protocol keeps its entries: read them, write them back with
// optimistic concurrency.
type entryStore interface {
	// upsert applies fn to the current entries and writes the result; it returns a conflict
	// error when someone wrote in between.
	upsert(ctx context.Context, fn func([]cdv1beta1.ComputeDomainDaemonInfo) []cdv1beta1.ComputeDomainDaemonInfo) error
}

// peerDaemon reproduces the original daemons' registration: each daemon read-modify-writes its
// own entry (lowest free index in its clique, NotReady), retrying on conflicts; starts IMEX;
// then read-modify-writes its entry to Ready.
func peerDaemon(ctx context.Context, _ client.WithWatch, cfg daemon.Config, x *instantIMEX, store entryStore) error {
	register := func(status string) error {
		return retryOnConflict(ctx, func() error {
			return store.upsert(ctx, func(entries []cdv1beta1.ComputeDomainDaemonInfo) []cdv1beta1.ComputeDomainDaemonInfo {
				used := sets.New[int]()
				for i, e := range entries {
					if e.NodeName == cfg.NodeName {
						entries[i].Status, entries[i].IPAddress = status, cfg.PodIP
						return entries
					}
					if e.CliqueID == cfg.CliqueID {
						used.Insert(e.Index)
					}
				}
				idx := 0
				for used.Has(idx) {
					idx++
				}
				return append(entries, cdv1beta1.ComputeDomainDaemonInfo{
					NodeName: cfg.NodeName, IPAddress: cfg.PodIP, CliqueID: cfg.CliqueID, Index: idx, Status: status,
				})
			})
		})
	}
	if err := register(cdv1beta1.StatusNotReady); err != nil {
		return err
	}
	if _, err := x.Start(ctx); err != nil {
		return err
	}
	return register(cdv1beta1.StatusReady)
}

// retryOnConflict retries fn on conflicts, as the original daemons do, and on what the
// apiserver could not take (lost connections, 429, 5xx).
func retryOnConflict(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// legacyStore keeps entries in the ComputeDomain's status.nodes.
type legacyStore struct {
	c  client.Client
	cd *cdv1beta1.ComputeDomain
}

func (s legacyStore) upsert(ctx context.Context, fn func([]cdv1beta1.ComputeDomainDaemonInfo) []cdv1beta1.ComputeDomainDaemonInfo) error {
	cd := &cdv1beta1.ComputeDomain{}
	if err := s.c.Get(ctx, client.ObjectKeyFromObject(s.cd), cd); err != nil {
		return err
	}
	var entries []cdv1beta1.ComputeDomainDaemonInfo
	for _, n := range cd.Status.Nodes {
		entries = append(entries, cdv1beta1.ComputeDomainDaemonInfo{NodeName: n.Name, IPAddress: n.IPAddress, CliqueID: n.CliqueID, Index: n.Index, Status: n.Status})
	}
	entries = fn(entries)
	cd.Status.Nodes = cd.Status.Nodes[:0]
	for _, e := range entries {
		cd.Status.Nodes = append(cd.Status.Nodes, cdv1beta1.ComputeDomainNode{Name: e.NodeName, IPAddress: e.IPAddress, CliqueID: e.CliqueID, Index: e.Index, Status: e.Status})
	}
	if cd.Status.Status == "" {
		cd.Status.Status = cdv1beta1.StatusNotReady
	}
	return s.c.Status().Update(ctx, cd)
}

// cliqueStore keeps entries in the daemon's clique object, created by the first daemon.
type cliqueStore struct {
	c        client.Client
	ns, name string
	cliqueID string
}

func (s cliqueStore) upsert(ctx context.Context, fn func([]cdv1beta1.ComputeDomainDaemonInfo) []cdv1beta1.ComputeDomainDaemonInfo) error {
	cl := &cdv1beta1.ComputeDomainClique{}
	err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.name}, cl)
	if apierrors.IsNotFound(err) {
		cl = &cdv1beta1.ComputeDomainClique{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name,
			Labels: map[string]string{cdv1beta1.CliqueIDLabel: s.cliqueID}}}
		cl.Daemons = fn(nil)
		return s.c.Create(ctx, cl)
	}
	if err != nil {
		return fmt.Errorf("reading clique: %w", err)
	}
	cl.Daemons = fn(cl.Daemons)
	return s.c.Update(ctx, cl)
}
