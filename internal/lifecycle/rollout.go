package lifecycle

import (
	"context"
	"fmt"

	"helm.sh/helm/v4/pkg/kube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/plane"
)

// waitPlaneReady waits for the plane's controller Deployment and kubelet plugin DaemonSet to
// have rolled out, as Helm's status watcher (kstatus) decides: each Current, its status
// observed for its latest generation, every replica updated and available. The progress shown
// meanwhile is read from the two objects. An upgrade is live only once the previous controller
// is gone, terminating pods included (until it exits it may still lead and act on the old
// configuration), which kstatus does not look at: that is waited for after.
func (m *Manager) waitPlaneReady(ctx context.Context, id, ns string) error {
	dep := types.NamespacedName{Namespace: ns, Name: plane.Name(id, "cdplane-controller")}
	ds := types.NamespacedName{Namespace: ns, Name: plane.Name(id, "cdplane-kubelet-plugin")}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rollout, err := m.watchRollout(ctx, ns, rolloutResources(dep, ds))
	if err != nil {
		return err
	}
	rolledOut := false
	return m.waitFor(ctx, "the controller and the kubelet plugin to be ready", func(ctx context.Context) (bool, string, error) {
		if !rolledOut {
			select {
			case err := <-rollout:
				if err != nil {
					return false, "", err
				}
				rolledOut = true
			default:
			}
		}
		d := &appsv1.Deployment{}
		if err := m.c.Get(ctx, dep, d); err != nil {
			return false, "", err
		}
		s := &appsv1.DaemonSet{}
		if err := m.c.Get(ctx, ds, s); err != nil {
			return false, "", err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		status := fmt.Sprintf("controller %d/%d available, kubelet plugin %d/%d nodes ready",
			d.Status.AvailableReplicas, want, s.Status.NumberAvailable, s.Status.DesiredNumberScheduled)
		if !rolledOut {
			// Why the pods that are not Ready are not, as their status says: an image that
			// cannot be pulled, a crash loop, no node to run on.
			if why := m.waitingReasons(ctx, d, s); why != "" {
				status += "; waiting: " + why
			}
			return false, status, nil
		}
		old, err := m.outdatedPods(ctx, d)
		if err != nil {
			return false, "", err
		}
		if old > 0 {
			return false, fmt.Sprintf("waiting for %d previous controller pod(s) to exit", old), nil
		}
		return true, status, nil
	})
}

// rolloutResources lists the Deployment dep and the DaemonSet ds for Helm's status watcher.
func rolloutResources(dep, ds types.NamespacedName) kube.ResourceList {
	d := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name}}
	s := &appsv1.DaemonSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: ds.Name}}
	return kube.ResourceList{
		{Namespace: dep.Namespace, Name: dep.Name, Object: d},
		{Namespace: ds.Namespace, Name: ds.Name, Object: s},
	}
}

// watchRollout starts Helm's status watcher (kstatus) on resources in namespace ns and returns
// the channel its outcome comes on: nil once every resource is Current, or why not (one Failed,
// as a Deployment past its progress deadline, or ctx ended). Its own timeout is left to the
// caller's wait (ctx), which says what it waited for.
func (m *Manager) watchRollout(ctx context.Context, ns string, resources kube.ResourceList) (<-chan error, error) {
	cfg, err := m.helmFor(ns)
	if err != nil {
		return nil, err
	}
	kc, ok := cfg.KubeClient.(kube.InterfaceWaitOptions)
	if !ok {
		return nil, fmt.Errorf("the Helm client (%T) takes no wait options", cfg.KubeClient)
	}
	w, err := kc.GetWaiterWithOptions(kube.StatusWatcherStrategy, kube.WithWaitContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("setting up Helm's status watcher: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		// The caller's wait times out first (m.opts.Timeout) and says so; ctx then ends this one.
		done <- w.Wait(resources, 2*m.opts.Timeout)
	}()
	return done, nil
}

// outdatedPods counts the Deployment's pods that are not of its current template, or are
// terminating.
func (m *Manager) outdatedPods(ctx context.Context, d *appsv1.Deployment) (int, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return 0, err
	}
	pods := &corev1.PodList{}
	if err := m.c.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return 0, err
	}
	hash := ""
	rss := &appsv1.ReplicaSetList{}
	if err := m.c.List(ctx, rss, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return 0, err
	}
	for _, rs := range rss.Items {
		if metav1.IsControlledBy(&rs, d) && rs.Annotations["deployment.kubernetes.io/revision"] == d.Annotations["deployment.kubernetes.io/revision"] {
			hash = rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		}
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || (hash != "" && p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != hash) {
			n++
		}
	}
	return n, nil
}
