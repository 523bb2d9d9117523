package daemon

import (
	"context"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/imex"
)

// source watches one object by name and signals every change on notify.
type source struct {
	store toolscache.Store
	ctrl  toolscache.Controller
}

func watchByName(ctx context.Context, c client.WithWatch, list client.ObjectList, obj client.Object, ns, name string, notify func()) *source {
	sel := fields.OneTermEqualSelector("metadata.name", name)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l := list.DeepCopyObject().(client.ObjectList)
			opts.FieldSelector = sel.String()
			err := c.List(ctx, l, &client.ListOptions{Namespace: ns, Raw: &opts})
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel.String()
			return c.Watch(ctx, list.DeepCopyObject().(client.ObjectList), &client.ListOptions{Namespace: ns, Raw: &opts})
		},
	}
	h := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	store, ctrl := toolscache.NewInformerWithOptions(toolscache.InformerOptions{ListerWatcher: lw, ObjectType: obj, Handler: h})
	s := &source{store: store, ctrl: ctrl}
	go ctrl.RunWithContext(ctx)
	return s
}

func (s *source) get() any {
	items := s.store.List()
	if len(items) == 0 {
		return nil
	}
	return items[0]
}

// membershipView reads the daemon's peers from its clique when it exists, otherwise from its
// domain's status.nodes (the entries of its clique), so the daemon behaves the same whichever
// way the ComputeDomainCliques gate is set.
type membershipView struct {
	clique, domain *source
	cliqueID       string
}

// peers returns the clique's members with an index, and this node's entry if it has one.
func (m *membershipView) peers(node string) (peers []imex.Peer, self *imex.Peer) {
	var entries []cdv1beta1.ComputeDomainDaemonInfo
	if c, ok := m.clique.get().(*cdv1beta1.ComputeDomainClique); ok && c != nil {
		entries = c.Daemons
	} else if cd, ok := m.domain.get().(*cdv1beta1.ComputeDomain); ok && cd != nil {
		for _, n := range cd.Status.Nodes {
			if n.CliqueID == m.cliqueID {
				entries = append(entries, cdv1beta1.ComputeDomainDaemonInfo{NodeName: n.Name, IPAddress: n.IPAddress, CliqueID: n.CliqueID, Index: n.Index, Status: n.Status})
			}
		}
	}
	for _, e := range entries {
		if e.Index < 0 || e.IPAddress == "" {
			continue
		}
		p := imex.Peer{NodeName: e.NodeName, IPAddress: e.IPAddress, Index: e.Index}
		peers = append(peers, p)
		if e.NodeName == node {
			self = &p
		}
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].Index < peers[j].Index })
	return peers, self
}

func (m *membershipView) hasSynced() bool {
	return m.clique.ctrl.HasSynced() && m.domain.ctrl.HasSynced()
}
