package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// node is one simulated node.
type node struct {
	k        *Kubelet
	spec     NodeSpec
	ip       netip.Addr
	dir      string
	recorder record.EventRecorder
	cdi      *cdiResolver

	mu       sync.Mutex
	uid      types.UID
	port     int
	plugins  map[string]*plugin               // by driver name
	sockets  map[string]socketInfo            // by registration socket path
	claimRef map[types.UID]map[types.UID]bool // claim UID → pods on this node using it
}

func newNode(k *Kubelet, spec NodeSpec, ip netip.Addr, dir string) *node {
	return &node{
		k: k, spec: spec, ip: ip, dir: dir, cdi: &cdiResolver{nodeDir: dir},
		plugins: map[string]*plugin{}, sockets: map[string]socketInfo{}, claimRef: map[types.UID]map[types.UID]bool{},
	}
}

// registerNodes creates or updates every Node, a few at a time.
func (k *Kubelet) registerNodes(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, n := range k.order {
		g.Go(func() error { return n.register(ctx) })
	}
	return g.Wait()
}

// register creates the Node, or brings an existing one's labels up to date.
func (n *node) register(ctx context.Context) error {
	nodes := n.k.client.CoreV1().Nodes()
	labels := map[string]string{corev1.LabelHostname: n.spec.Name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}
	for k, v := range n.spec.Labels {
		labels[k] = v
	}
	got, err := nodes.Get(ctx, n.spec.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		got, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.spec.Name, Labels: labels}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = nodes.Get(ctx, n.spec.Name, metav1.GetOptions{})
		}
	} else if err == nil && !containsAll(got.Labels, labels) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
		got, err = nodes.Patch(ctx, n.spec.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		return fmt.Errorf("registering node %s: %w", n.spec.Name, err)
	}
	n.mu.Lock()
	n.uid = got.UID
	n.mu.Unlock()
	return nil
}

func containsAll(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// updateNodeStatuses writes every node's status.
func (k *Kubelet) updateNodeStatuses(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, n := range k.order {
		g.Go(func() error { return n.updateStatus(ctx) })
	}
	return g.Wait()
}

// updateStatus writes the node's status: capacity, Ready and the pressure conditions,
// addresses, the log endpoint's port and node info.
func (n *node) updateStatus(ctx context.Context) error {
	now := metav1.Now()
	n.mu.Lock()
	port := n.port
	n.mu.Unlock()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now}
	}
	status := corev1.NodeStatus{
		Capacity: n.spec.Capacity, Allocatable: n.spec.Capacity,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "simulated kubelet is posting ready status"),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.ip.String()},
			{Type: corev1.NodeHostName, Address: n.spec.Name},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID: n.spec.Name, SystemUUID: n.spec.Name, BootID: string(n.uid),
			KernelVersion: "sim", OSImage: "cdplane simulated node", ContainerRuntimeVersion: "sim://1",
			KubeletVersion: n.k.cfg.KubeletVersion, OperatingSystem: "linux", Architecture: "amd64",
		},
	}
	// Keep the transition times of conditions whose status did not change.
	if got, err := n.k.client.CoreV1().Nodes().Get(ctx, n.spec.Name, metav1.GetOptions{ResourceVersion: "0"}); err == nil {
		for i := range status.Conditions {
			c := &status.Conditions[i]
			c.LastTransitionTime = now
			for _, old := range got.Status.Conditions {
				if old.Type == c.Type && old.Status == c.Status && !old.LastTransitionTime.IsZero() {
					c.LastTransitionTime = old.LastTransitionTime
				}
			}
		}
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	if _, err := n.k.client.CoreV1().Nodes().Patch(ctx, n.spec.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("node %s status: %w", n.spec.Name, err)
	}
	return nil
}

// renewLeases keeps every node's Lease renewed, each on its own jittered schedule so that the
// renewals of many nodes spread evenly over the interval; the node's status is written again
// every NodeStatusReportInterval.
func (k *Kubelet) renewLeases(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, n := range k.order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.leaseLoop(ctx)
		}()
	}
}

func (n *node) leaseLoop(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("node", n.spec.Name)
	cfg := n.k.cfg
	var lease *coordinationv1.Lease
	lastStatus, lastRenewed, lastLapse := time.Now(), time.Now(), time.Time{}
	// The first renewal comes at a random point of the first interval.
	delay := time.Duration(rand.Int64N(int64(cfg.LeaseRenewInterval)))
	for {
		if lease == nil || delay == 0 {
			var err error
			if lease, err = n.renewLease(ctx, lease); err != nil {
				if ctx.Err() != nil {
					return
				}
				logger.Error(err, "Renewing the node lease")
				lease, lastLapse = nil, time.Now()
			} else {
				if time.Since(lastRenewed) > cfg.LeaseDuration {
					lastLapse = time.Now() // renewed, but too late (a starved process)
				}
				lastRenewed = time.Now()
			}
		}
		// The node lifecycle controller marks a node whose lease it saw lapse Unknown (and
		// taints it unreachable), possibly after the lease was renewed again: its informers
		// come back late from an apiserver restart too. A kubelet reads its Node every 10 s and
		// writes its status when the Ready condition is not its own. This one does so (a read
		// from the apiserver's watch cache) on every renewal for a while after its lease failed
		// or lapsed, rather than leave the node unschedulable until NodeStatusReportInterval;
		// never otherwise, so that a large simulated cluster costs no read per node and minute.
		recovering := !lastLapse.IsZero() && time.Since(lastLapse) < cfg.LeaseDuration+2*cfg.LeaseRenewInterval
		if lease != nil && recovering {
			if ready, err := n.readyPosted(ctx); err == nil && !ready {
				lastStatus = time.Time{} // write it now
			}
		}
		if time.Since(lastStatus) >= cfg.NodeStatusReportInterval {
			if err := n.updateStatus(ctx); err != nil && ctx.Err() == nil {
				logger.Error(err, "Updating the node status")
			}
			lastStatus = time.Now()
		}
		if delay == 0 {
			delay = jitter(cfg.LeaseRenewInterval, 0.1)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = 0
	}
}

// readyPosted reports whether the node's Ready condition, as the apiserver's watch cache has it,
// is True: what this kubelet last wrote, unless the node lifecycle controller changed it.
func (n *node) readyPosted(ctx context.Context) (bool, error) {
	got, err := n.k.client.CoreV1().Nodes().Get(ctx, n.spec.Name, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return false, err
	}
	for _, c := range got.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, nil
		}
	}
	return false, nil
}

// jitter returns d changed by a random fraction in [-f, f].
func jitter(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * (1 + f*(2*rand.Float64()-1)))
}

// renewLease updates the lease from the last copy written (no read); on a conflict or without
// a copy it reads the lease, creating it when missing.
func (n *node) renewLease(ctx context.Context, last *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := n.k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	if last != nil {
		l := last.DeepCopy()
		l.Spec.RenewTime = &now
		got, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			return got, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	got, err := leases.Get(ctx, n.spec.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n.mu.Lock()
		uid := n.uid
		n.mu.Unlock()
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.spec.Name, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.spec.Name, UID: uid}}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(n.spec.Name), RenewTime: &now,
				LeaseDurationSeconds: ptr.To(int32(n.k.cfg.LeaseDuration / time.Second)),
			},
		}
		return leases.Create(ctx, l, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, err
	}
	got.Spec.RenewTime = &now
	got.Spec.HolderIdentity = ptr.To(n.spec.Name)
	got.Spec.LeaseDurationSeconds = ptr.To(int32(n.k.cfg.LeaseDuration / time.Second))
	return leases.Update(ctx, got, metav1.UpdateOptions{})
}
