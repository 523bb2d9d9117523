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
// way the ComputeDomainCliques gate is set. The domain is watched only while the clique does
// not exist: a domain's status changes with every node of every clique, and thousands of
// daemons need not receive it when their clique carries what they need.
type membershipView struct {
	ctx    context.Context
	c      client.WithWatch
	cfg    Config
	notify func()

	clique     *source
	domain     *source
	stopDomain context.CancelFunc
}

func newMembershipView(ctx context.Context, c client.WithWatch, cfg Config, notify func()) *membershipView {
	return &membershipView{
		ctx: ctx, c: c, cfg: cfg, notify: notify,
		clique: watchByName(ctx, c, &cdv1beta1.ComputeDomainCliqueList{}, &cdv1beta1.ComputeDomainClique{},
			cfg.PodNamespace, cfg.CliqueObjectName(), notify),
	}
}

// update starts or stops the domain watch as the clique comes and goes, and reports whether the
// view is complete (every running watch has synced).
func (m *membershipView) update() bool {
	if !m.clique.ctrl.HasSynced() {
		return false
	}
	_, hasClique := m.clique.get().(*cdv1beta1.ComputeDomainClique)
	switch {
	case hasClique && m.domain != nil:
		m.stopDomain()
		m.domain, m.stopDomain = nil, nil
	case !hasClique && m.domain == nil:
		ctx, cancel := context.WithCancel(m.ctx)
		m.domain = watchByName(ctx, m.c, &cdv1beta1.ComputeDomainList{}, &cdv1beta1.ComputeDomain{},
			m.cfg.CDNamespace, m.cfg.CDName, m.notify)
		m.stopDomain = cancel
	}
	return m.domain == nil || m.domain.ctrl.HasSynced()
}

func (m *membershipView) close() {
	if m.stopDomain != nil {
		m.stopDomain()
	}
}

// domainSize reports how many nodes the domain lists in its status and how many it wants
// (spec.numNodes); ok is false while the domain is not watched (its clique holds the
// membership) or not seen yet.
func (m *membershipView) domainSize() (joined, numNodes int, ok bool) {
	if m.domain == nil {
		return 0, 0, false
	}
	cd, isCD := m.domain.get().(*cdv1beta1.ComputeDomain)
	if !isCD || cd == nil {
		return 0, 0, false
	}
	return len(cd.Status.Nodes), cd.Spec.NumNodes, true
}

// peers returns the clique's members with an index, and this node's entry if it has one.
func (m *membershipView) peers(node string) (peers []imex.Peer, self *imex.Peer) {
	var entries []cdv1beta1.ComputeDomainDaemonInfo
	if c, ok := m.clique.get().(*cdv1beta1.ComputeDomainClique); ok && c != nil {
		entries = c.Daemons
	} else if m.domain != nil {
		if cd, ok := m.domain.get().(*cdv1beta1.ComputeDomain); ok && cd != nil {
			for _, n := range cd.Status.Nodes {
				if n.CliqueID == m.cfg.CliqueID {
					entries = append(entries, cdv1beta1.ComputeDomainDaemonInfo{NodeName: n.Name, IPAddress: n.IPAddress, CliqueID: n.CliqueID, Index: n.Index, Status: n.Status})
				}
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
