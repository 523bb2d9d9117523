package daemon

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/imex"
	"cdplane/internal/scheme"
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
// exist, and with the gate on only once the clique went or did not come and the domain does not
// say its membership is in cliques (wantDomain): a domain's status changes with every node of
// every clique, and thousands of daemons need not receive it when their clique carries what
// they need.
type membershipView struct {
	ctx    context.Context
	c      client.WithWatch
	cfg    Config
	notify func()

	clique     *source
	domain     *source
	stopDomain context.CancelFunc

	// seenClique is set once the clique existed; started is when the daemon's pod was labelled
	// (registered; zero before), now the clock (time.Now unless a test sets it).
	seenClique bool
	started    time.Time
	now        func() time.Time
	// readPlace reads where the domain's controller keeps its membership, and place follows it
	// once CliqueWait has passed since the label without the clique (nil with Config.Cliques
	// off, and before registered).
	readPlace func(context.Context) (string, error)
	place     *placeFollower
}

// CliqueWait is how long a daemon with Config.Cliques waits for its clique, counted from the
// label on its pod (the controller places no daemon before it sees that label), before it looks
// where the domain's controller keeps its membership, and reads the domain's status unless that
// is in cliques (a controller whose gate is off while this daemon's is on, or NVIDIA's, which
// does not say); while the domain says cliques it looks again every CliqueWait.
//
// Counted from the daemon's start, as it once was, the wait ran out in a large burst for most
// daemons before their label was even written, and they all read the domain's annotation in the
// one flow of the daemons' service account where their labels waited to be admitted (see
// docs/scale.md, "Design choices and what was measured").
const CliqueWait = 2 * time.Minute

// placeRetry is how soon a failed read of the domain's membership annotation is tried again.
const placeRetry = 15 * time.Second

func newMembershipView(ctx context.Context, c client.WithWatch, cfg Config, notify func(), log logr.Logger) *membershipView {
	return &membershipView{
		ctx: ctx, c: c, cfg: cfg, notify: notify, now: time.Now, readPlace: placeReader(c, cfg, log),
		clique: watchByName(ctx, c, &cdv1beta1.ComputeDomainCliqueList{}, &cdv1beta1.ComputeDomainClique{},
			cfg.PodNamespace, cfg.CliqueObjectName(), notify),
	}
}

// registered starts the clique wait: the daemon's pod carries its clique label now, from which
// the controller places it. Called once, after the label, before the view is updated.
func (m *membershipView) registered() {
	m.started = m.now()
	if m.cfg.Cliques {
		m.place = followPlace(m.ctx, m.cfg.cliqueWait(), placeRetry, m.readPlace, m.notify)
	}
}

// placeReader reads the domain's membership place for the follower, and logs a read that
// failed while the daemon runs: a Forbidden would otherwise leave the daemon waiting silently.
func placeReader(c client.Client, cfg Config, log logr.Logger) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		place, err := membershipPlace(ctx, c, cfg.CDNamespace, cfg.CDName)
		if err != nil && ctx.Err() == nil {
			log.Error(err, "Reading where the domain keeps its membership; trying again", "after", placeRetry)
		}
		return place, err
	}
}

// wantDomain says whether the domain's status is to be read: never while the clique exists;
// without it, at once when the controller does not keep cliques (Config.Cliques off) or when
// the clique went after it had been seen (the gate was turned off under this daemon); else
// only once the clique wait (Config.CliqueWait) has passed since the label and the domain was
// read not to say its membership is in cliques (the follower reads it only after that wait;
// the time is checked here too so that the decision never rests on the follower's timer
// alone). Thousands of daemons starting together before the controller wrote their cliques
// would otherwise each receive the domain's whole status on every change until it did: in a
// large burst, the daemons still waiting after the clique wait watched a domain with an entry
// per node, and every status write went to each of them.
func (m *membershipView) wantDomain(hasClique bool) bool {
	if hasClique {
		m.seenClique = true
		m.place.stop() // the clique carries the membership; no more reads of the domain
		return false
	}
	if !m.cfg.Cliques || m.seenClique {
		return true
	}
	if m.started.IsZero() || m.now().Sub(m.started) < m.cfg.cliqueWait() {
		return false
	}
	place, known := m.place.get()
	return known && place != cdv1beta1.MembershipInCliques
}

// membershipPlace reads the domain's MembershipAnnotation, its metadata only and from the
// apiserver's watch cache: "" when the domain has none (NVIDIA's controller) or does not exist.
func membershipPlace(ctx context.Context, c client.Client, ns, name string) (string, error) {
	meta := scheme.Meta(cdv1beta1.GroupVersion.WithKind("ComputeDomain"))
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, meta, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return meta.GetAnnotations()[cdv1beta1.MembershipAnnotation], nil
}

// placeFollower reads, off the daemon's loop, where the domain's controller keeps its
// membership: first after wait, then again after wait while it says cliques, or after retry
// when a read failed; it stops once the place is another (the domain is watched from
// then on) or stop is called. Each read that completes calls notify.
type placeFollower struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	place string
	known bool
}

func followPlace(ctx context.Context, wait, retry time.Duration, read func(context.Context) (string, error), notify func()) *placeFollower {
	ctx, cancel := context.WithCancel(ctx)
	f := &placeFollower{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, wait)
			place, err := read(rctx)
			rcancel()
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				f.mu.Lock()
				f.place, f.known = place, true
				f.mu.Unlock()
				notify()
				if place != cdv1beta1.MembershipInCliques {
					return
				}
			}
			next := wait
			if err != nil {
				next = retry
			}
			timer.Reset(next)
		}
	}()
	return f
}

// get returns the place last read, and whether one was (never on a nil follower).
func (f *placeFollower) get() (string, bool) {
	if f == nil {
		return "", false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.place, f.known
}

// stop ends the reads and waits for the one in flight (cancelled); nothing on a nil follower.
func (f *placeFollower) stop() {
	if f == nil {
		return
	}
	f.cancel()
	<-f.done
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
	m.place.stop()
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
