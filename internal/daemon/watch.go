package daemon

import (
	"context"
	"sort"
	"time"

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
			anyVersion(&opts)
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

// anyVersion lets a watch that streams its initial state (client-go's watch-list, on by default)
// start from whatever the apiserver's watch cache holds rather than at etcd's latest revision.
// The reflector asks for the latest (resourceVersion "") on its first watch and after its
// version expired, which costs the apiserver a read of etcd's revision and holds the request,
// and its seat, until the cache has caught up with it; under a burst of thousands of daemons
// starting at once, that wait is seconds. A daemon needs no such guarantee: it acts on what its
// clique says and on every later change, which the watch delivers in order from the version it
// started at (resourceVersion "0", "not older than any", as a classic informer's first list
// reads). A resumed watch (a version the reflector saw) is left alone.
func anyVersion(opts *metav1.ListOptions) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents && opts.ResourceVersion == "" {
		opts.ResourceVersion = "0"
	}
}

func (s *source) get() any {
	items := s.store.List()
	if len(items) == 0 {
		return nil
	}
	return items[0]
}

// membershipView reads the daemon's peers from its clique when it exists, otherwise from its
// domain's status.nodes (the entries of its clique), so the daemon follows a controller with
// the ComputeDomainCliques gate either way. The domain is watched only while the clique does not
// exist, and with the gate on only once the clique went or did not come (wantDomain): a domain's
// status changes with every node of every clique, and thousands of daemons need not receive it
// when their clique carries what they need.
type membershipView struct {
	ctx    context.Context
	c      client.WithWatch
	cfg    Config
	notify func()

	clique     *source
	domain     *source
	stopDomain context.CancelFunc

	// seenClique is set once the clique existed; started is when the view began, now the clock
	// (time.Now unless a test sets it), and waited fires notify once CliqueWait has passed.
	seenClique bool
	started    time.Time
	now        func() time.Time
	waited     *time.Timer
}

// CliqueWait is how long a daemon with Config.Cliques waits for its clique before it also reads
// the domain's status (a controller whose gate is off while this daemon's is on).
const CliqueWait = 2 * time.Minute

func newMembershipView(ctx context.Context, c client.WithWatch, cfg Config, notify func()) *membershipView {
	m := &membershipView{
		ctx: ctx, c: c, cfg: cfg, notify: notify, started: time.Now(), now: time.Now,
		clique: watchByName(ctx, c, &cdv1beta1.ComputeDomainCliqueList{}, &cdv1beta1.ComputeDomainClique{},
			cfg.PodNamespace, cfg.CliqueObjectName(), notify),
	}
	if cfg.Cliques {
		m.waited = time.AfterFunc(CliqueWait, notify)
	}
	return m
}

// wantDomain says whether the domain's status is to be read: never while the clique exists;
// without it, at once when the controller does not keep cliques (Config.Cliques off), else only
// when the clique went after it had been seen or did not come within CliqueWait. Thousands of
// daemons starting together before the controller wrote their cliques would otherwise each
// receive the domain's whole status on every change until it did.
func (m *membershipView) wantDomain(hasClique bool) bool {
	if hasClique {
		m.seenClique = true
		return false
	}
	return !m.cfg.Cliques || m.seenClique || m.now().Sub(m.started) >= CliqueWait
}

// update starts or stops the domain watch as the clique comes and goes, and reports whether the
// view is complete (every running watch has synced).
func (m *membershipView) update() bool {
	if !m.clique.ctrl.HasSynced() {
		return false
	}
	_, hasClique := m.clique.get().(*cdv1beta1.ComputeDomainClique)
	want := m.wantDomain(hasClique)
	switch {
	case !want && m.domain != nil:
		m.stopDomain()
		m.domain, m.stopDomain = nil, nil
	case want && m.domain == nil:
		ctx, cancel := context.WithCancel(m.ctx)
		m.domain = watchByName(ctx, m.c, &cdv1beta1.ComputeDomainList{}, &cdv1beta1.ComputeDomain{},
			m.cfg.CDNamespace, m.cfg.CDName, m.notify)
		m.stopDomain = cancel
	}
	return m.domain == nil || m.domain.ctrl.HasSynced()
}

func (m *membershipView) close() {
	if m.waited != nil {
		m.waited.Stop()
	}
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

// entries are the clique's entries: the clique's, else those of the domain's status.nodes in
// this node's clique.
func (m *membershipView) entries() []cdv1beta1.ComputeDomainDaemonInfo {
	if c, ok := m.clique.get().(*cdv1beta1.ComputeDomainClique); ok && c != nil {
		return c.Daemons
	}
	var entries []cdv1beta1.ComputeDomainDaemonInfo
	if m.domain != nil {
		if cd, ok := m.domain.get().(*cdv1beta1.ComputeDomain); ok && cd != nil {
			for _, n := range cd.Status.Nodes {
				if n.CliqueID == m.cfg.CliqueID {
					entries = append(entries, cdv1beta1.ComputeDomainDaemonInfo{NodeName: n.Name, IPAddress: n.IPAddress, CliqueID: n.CliqueID, Index: n.Index, Status: n.Status})
				}
			}
		}
	}
	return entries
}

// ready reports whether this node's entry is Ready.
func (m *membershipView) ready(node string) bool {
	for _, e := range m.entries() {
		if e.NodeName == node {
			return e.Status == cdv1beta1.StatusReady
		}
	}
	return false
}

// peers returns the clique's members with an index, and this node's entry if it has one.
func (m *membershipView) peers(node string) (peers []imex.Peer, self *imex.Peer) {
	for _, e := range m.entries() {
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
