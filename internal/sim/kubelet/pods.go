package kubelet

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// watchPods runs one pod informer for all nodes (every pod bound to some node) and hands the
// pods of this kubelet's nodes to their workers.
func (k *Kubelet) watchPods(ctx context.Context, wg *sync.WaitGroup) error {
	factory := informers.NewSharedInformerFactoryWithOptions(k.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" }))
	inf := factory.Core().V1().Pods().Informer()
	// Only what the workers read is kept: managed fields are dropped, and of a pod on a node of
	// another kubelet process (the sim's nodes are shared among several) only what names it.
	if err := inf.SetTransform(k.keepOfPod); err != nil {
		return err
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.podChanged(ctx, obj) },
		UpdateFunc: func(_, obj any) { k.podChanged(ctx, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				k.podDeleted(p)
			}
		},
	})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		factory.Start(ctx.Done())
		factory.Shutdown()
	}()
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	return nil
}

// keepOfPod is the pod informer's transform: what of a pod is kept in its cache.
func (k *Kubelet) keepOfPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	if k.nodes[p.Spec.NodeName] == nil {
		return foreignPod(p), nil
	}
	p.ManagedFields = nil
	return p, nil
}

// foreignPod is what the pod informer keeps of a pod that is not on one of this kubelet's
// nodes: its name, UID, version and node, which podChanged ignores.
func foreignPod(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName},
	}
}

func (k *Kubelet) podChanged(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	n := k.nodes[pod.Spec.NodeName]
	if n == nil {
		return
	}
	k.mu.Lock()
	w := k.workers[pod.UID]
	if w == nil {
		if ctx.Err() != nil || isTerminal(pod) && pod.DeletionTimestamp == nil {
			// Finished before this kubelet saw it: nothing to run.
			k.mu.Unlock()
			return
		}
		w = newPodWorker(k, n, pod)
		k.workers[pod.UID] = w
		k.workerWG.Add(1)
		k.mu.Unlock()
		go w.run(ctx)
		return
	}
	k.mu.Unlock()
	w.update(pod, false)
}

func (k *Kubelet) podDeleted(pod *corev1.Pod) {
	k.mu.Lock()
	w := k.workers[pod.UID]
	k.mu.Unlock()
	if w != nil {
		w.update(pod, true)
	}
}

func (k *Kubelet) removeWorker(uid types.UID) {
	k.mu.Lock()
	delete(k.workers, uid)
	k.mu.Unlock()
}

// workerByName finds the worker of a pod on a node.
func (k *Kubelet) workerByName(node, ns, name string) *podWorker {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.workers {
		if w.n.spec.Name == node && w.key.Namespace == ns && w.key.Name == name {
			return w
		}
	}
	return nil
}

func isTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func (k *Kubelet) configMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return k.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

func (k *Kubelet) secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return k.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

// kubeletSource reads ConfigMaps and Secrets for env resolution.
type kubeletSource struct{ k *Kubelet }

func (s kubeletSource) configMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return s.k.configMap(ctx, ns, name)
}

func (s kubeletSource) secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return s.k.secret(ctx, ns, name)
}

var _ = klog.KObj
