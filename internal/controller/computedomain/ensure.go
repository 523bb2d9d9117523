package computedomain

import (
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/features"
)

// ensureResources creates the domain's workload and daemon ResourceClaimTemplates and its
// DaemonSet when they are missing, and brings those it created back to what this version
// renders (drift.go). It never changes an object it did not create: a clash is reported in the
// returned ResourcesCreated condition. It returns the DaemonSet when it exists.
func (r *Reconciler) ensureResources(ctx context.Context, cd *cdv1beta1.ComputeDomain) (metav1.Condition, *appsv1.DaemonSet, error) {
	cond := metav1.Condition{
		Type: cdv1beta1.ConditionResourcesCreated, Status: metav1.ConditionTrue, Reason: cdv1beta1.ReasonCreated,
		ObservedGeneration: cd.Generation,
	}
	var clashes []string

	wl := r.workloadClaimTemplate(cd)
	if clash, err := r.ensure(ctx, cd, wl, newRCT()); err != nil {
		return cond, nil, err
	} else if clash != "" {
		clashes = append(clashes, clash)
	}
	if r.hostManaged() {
		// No daemon: the host's nvidia-imex serves the domain.
		if len(clashes) > 0 {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, cdv1beta1.ReasonNameClash, strings.Join(clashes, "; ")
			return cond, nil, nil
		}
		cond.Message = fmt.Sprintf("ResourceClaimTemplate %s/%s exists; IMEX runs as a host service (%s)", cd.Namespace, wl.Name, features.IMEXHostManaged)
		return cond, nil, nil
	}
	if clash, err := r.ensure(ctx, cd, r.daemonClaimTemplate(cd), newRCT()); err != nil {
		return cond, nil, err
	} else if clash != "" {
		clashes = append(clashes, clash)
	}
	ds := &appsv1.DaemonSet{TypeMeta: metav1.TypeMeta{Kind: "DaemonSet"}}
	desired := r.daemonSet(cd)
	r.keepCliquesGate(ctx, desired)
	clash, err := r.ensure(ctx, cd, desired, ds)
	if err != nil {
		return cond, nil, err
	}
	if clash != "" {
		clashes = append(clashes, clash)
		ds = nil
	}

	if len(clashes) > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, cdv1beta1.ReasonNameClash
		cond.Message = strings.Join(clashes, "; ")
		return cond, ds, nil
	}
	cond.Message = fmt.Sprintf("ResourceClaimTemplate %s/%s and DaemonSet %s/%s exist", cd.Namespace, wl.Name, ds.Namespace, ds.Name)
	return cond, ds, nil
}

// ensure creates desired when no object of its name exists, and otherwise reads the existing one
// into current and, when it was created for this domain, brings it back to desired (converge:
// after an upgrade of cdplane, or a hand edit). It returns a message when the existing object
// was not created for this domain; such an object is never written.
func (r *Reconciler) ensure(ctx context.Context, cd *cdv1beta1.ComputeDomain, desired, current client.Object) (string, error) {
	kind := current.GetObjectKind().GroupVersionKind().Kind
	stampDesiredHash(desired)
	key := client.ObjectKeyFromObject(desired)
	// The client's read waits for the cache to show this controller's own create of the object
	// in an earlier pass (see NewClient): a pass woken by the domain's status write can start
	// before the object's watch event arrives, and would otherwise send a create that can only
	// be refused.
	err := r.client.Get(ctx, key, current)
	if apierrors.IsNotFound(err) {
		// Checked against the server first, as before every write to the domain itself: the
		// cache may still show a domain that has moved to another plane (or is gone), whose
		// objects are that plane's to create. Creates are once per object, so the read is too.
		if ok, err := r.domainOwnedOnServer(ctx, cd); err != nil {
			return "", err
		} else if !ok {
			return "", errNotOwned
		}
		err = r.client.Create(ctx, desired)
		if apierrors.IsAlreadyExists(err) {
			// The cache holds only objects labelled for a domain: an unlabelled object of the
			// same name is not in it. Read it from the apiserver to see whose it is.
			err = r.reader.Get(ctx, key, current)
		} else if err == nil {
			ctrl.LoggerFrom(ctx).V(1).Info("Created object", "kind", kind, "object", klog.KObj(desired))
			copyInto(desired, current)
			return "", nil
		}
	}
	if err != nil {
		return "", fmt.Errorf("ensuring %s %s: %w", kind, key, err)
	}
	if !r.createdFor(current.GetLabels(), string(cd.UID)) {
		return fmt.Sprintf("%s %s exists and was not created for this ComputeDomain; it is left untouched (delete or rename it)", kind, key), nil
	}
	return "", r.converge(ctx, cd, desired, current)
}

// errNotOwned ends a pass that was about to create an object for a domain the apiserver says
// is not this plane's (the refusal is counted where it is found).
var errNotOwned = errors.New("the ComputeDomain is not this control plane's on the apiserver")

func copyInto(src, dst client.Object) {
	switch s := src.(type) {
	case *appsv1.DaemonSet:
		s.DeepCopyInto(dst.(*appsv1.DaemonSet))
	case *resourcev1.ResourceClaimTemplate:
		s.DeepCopyInto(dst.(*resourcev1.ResourceClaimTemplate))
	}
}

func newRCT() *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{TypeMeta: metav1.TypeMeta{Kind: "ResourceClaimTemplate"}}
}

// keepCliquesGate gives desired the ComputeDomainCliques value of the domain's DaemonSet as it
// stands (none when it has none), so that flipping the gate never changes a live DaemonSet and
// never rolls its daemons, whatever the update strategy: the gate tells a daemon only where to
// wait for its entry first, and a daemon of either value follows the controller either way
// (daemon.Config.Cliques). A DaemonSet created after the flip gets the new value.
func (r *Reconciler) keepCliquesGate(ctx context.Context, desired *appsv1.DaemonSet) {
	live := &appsv1.DaemonSet{}
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
		return // none yet (or unreadable: ensure reports it)
	}
	liveGates, _ := featureGatesEnv(live)
	if gates, ok := featureGatesEnv(desired); ok {
		*gates = withCliquesGateOf(*gates, *liveGates)
	}
}

// featureGatesEnv returns the FEATURE_GATES value of ds's daemon container, to read or set.
func featureGatesEnv(ds *appsv1.DaemonSet) (*string, bool) {
	for i := range ds.Spec.Template.Spec.Containers {
		c := &ds.Spec.Template.Spec.Containers[i]
		for j := range c.Env {
			if c.Env[j].Name == daemonenv.FeatureGates {
				return &c.Env[j].Value, true
			}
		}
	}
	empty := ""
	return &empty, false
}

// withCliquesGateOf returns gates with its ComputeDomainCliques item replaced by live's (removed
// when live has none); the other gates keep their order.
func withCliquesGateOf(gates, live string) string {
	prefix := string(features.ComputeDomainCliques) + "="
	var out []string
	for _, g := range strings.Split(gates, ",") {
		if g != "" && !strings.HasPrefix(g, prefix) {
			out = append(out, g)
		}
	}
	for _, g := range strings.Split(live, ",") {
		if strings.HasPrefix(g, prefix) {
			out = append(out, g)
		}
	}
	return strings.Join(out, ",")
}
