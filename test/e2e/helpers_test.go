package e2e

import (
	"cdplane/internal/lifecycle"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

func ctx() context.Context { return context.Background() }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// namespace creates a namespace for the test, assigned to plane id, removed at the end.
func namespace(t *testing.T, id string) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.TrimRight(name, "-") + "-" + fmt.Sprint(time.Now().UnixNano()%100000)
	must(t, c.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	if _, err := lifecycle.Assign(ctx(), c, id, lifecycle.Target{Kind: lifecycle.KindNamespace, Name: name}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dump(t, name, id)
		}
		// Leave nothing behind: the domains first (their finalizers remove node labels and
		// DaemonSets), then the namespace, so that the next scenario finds the nodes free. The
		// domains go first because of a known product bug: the controller's access to a plane's
		// namespace is a RoleBinding in it, which the namespace's deletion can remove before
		// the domain's finalizer is removed; the controller is then forbidden to remove it and
		// the namespace stays Terminating.
		bg := context.Background()
		if err := c.DeleteAllOf(bg, &cdv1beta1.ComputeDomain{}, client.InNamespace(name)); err != nil {
			t.Errorf("deleting the ComputeDomains of %s: %v", name, err)
		}
		err := wait.PollUntilContextTimeout(bg, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			cds := &cdv1beta1.ComputeDomainList{}
			err := c.List(ctx, cds, client.InNamespace(name))
			return err == nil && len(cds.Items) == 0, nil
		})
		if err != nil {
			t.Errorf("the ComputeDomains of %s not gone 3m after their deletion", name)
		}
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Delete(bg, nsObj); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting namespace %s: %v", name, err)
			return
		}
		err = wait.PollUntilContextTimeout(bg, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(nsObj), &corev1.Namespace{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("namespace %s not gone 3m after its deletion", name)
		}
	})
	return name
}

// waitPlanesIdle waits until the planes serve no domain and run healthy: no node of theirs
// carries a domain label, no daemon pod runs in their driver namespaces, their controller and
// every kubelet plugin are Ready. A scenario that needs a plane's nodes calls it first, so that
// it does not depend on what ran before it.
func waitPlanesIdle(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		driverNS := plane.Name(id, plane.DriverNamespaceLegacyName)
		testutil.Eventually(t, 4*time.Minute, "plane "+id+" idle and healthy", func() (bool, error) {
			nodes := &corev1.NodeList{}
			if err := c.List(ctx(), nodes, client.HasLabels{cdv1beta1.ComputeDomainLabel}); err != nil {
				return false, err
			}
			for _, n := range nodes.Items {
				if n.Labels[cdv1beta1.ControlPlaneLabel] == id {
					return false, fmt.Errorf("node %s serves domain %s", n.Name, n.Labels[cdv1beta1.ComputeDomainLabel])
				}
			}
			pods := &corev1.PodList{}
			if err := c.List(ctx(), pods, client.InNamespace(driverNS)); err != nil {
				return false, err
			}
			plugins, controllers := map[string]bool{}, 0
			for _, p := range pods.Items {
				name := p.Labels["app.kubernetes.io/name"]
				switch {
				case strings.HasPrefix(p.Name, "computedomain-daemon-"):
					return false, fmt.Errorf("daemon pod %s on %s", p.Name, p.Spec.NodeName)
				case name != "cdplane-controller" && name != "cdplane-kubelet-plugin":
				case p.DeletionTimestamp != nil || !podutils.IsPodReady(&p):
					return false, fmt.Errorf("pod %s not Ready", p.Name)
				case name == "cdplane-controller":
					controllers++
				default:
					plugins[p.Spec.NodeName] = true
				}
			}
			dep := &appsv1.Deployment{}
			if err := c.Get(ctx(), client.ObjectKey{Namespace: driverNS, Name: plane.Name(id, "cdplane-controller")}, dep); err != nil {
				return false, err
			}
			if want := ptr.Deref(dep.Spec.Replicas, 1); int32(controllers) != want {
				return false, fmt.Errorf("%d controller pods Ready, want %d", controllers, want)
			}
			for _, n := range simState.Nodes {
				if n.Plane == id && !plugins[n.Name] {
					return false, fmt.Errorf("no kubelet plugin Ready on %s", n.Name)
				}
			}
			return true, nil
		})
	}
}

// planeNodes returns the names of plane id's nodes in rack (all racks when rack < 0).
func planeNodes(id string, rack int) []string {
	var out []string
	for _, n := range simState.Nodes {
		if n.Plane == id && (rack < 0 || n.Rack == rack) {
			out = append(out, n.Name)
		}
	}
	return out
}

// dump logs what a user would look at when a scenario fails.
func dump(t *testing.T, ns, id string) {
	cds := &cdv1beta1.ComputeDomainList{}
	_ = c.List(ctx(), cds, client.InNamespace(ns))
	for _, cd := range cds.Items {
		t.Logf("ComputeDomain %s/%s: status %q ready %d/%d conditions %+v", ns, cd.Name, cd.Status.Status, cd.Status.ReadyNodes, cd.Status.TotalNodes, cd.Status.Conditions)
	}
	for _, n := range []string{ns, plane.Name(id, plane.DriverNamespaceLegacyName)} {
		pods := &corev1.PodList{}
		_ = c.List(ctx(), pods, client.InNamespace(n))
		for _, p := range pods.Items {
			t.Logf("pod %s/%s on %s: %s ready=%v", n, p.Name, p.Spec.NodeName, p.Status.Phase, podutils.IsPodReady(&p))
			if n == ns {
				t.Logf("  log tail:\n%s", logTail(&p, 6))
			}
		}
	}
	evs, _ := cs.CoreV1().Events(ns).List(ctx(), metav1.ListOptions{})
	for _, e := range evs.Items {
		t.Logf("event %s %s: %s %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
}

// logTail returns the last lines of the pod's log, or why it cannot.
func logTail(p *corev1.Pod, lines int64) string {
	rc, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &lines}).Stream(ctx())
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	data, _ := io.ReadAll(rc)
	return string(data)
}

// computeDomain creates a ComputeDomain in ns.
func computeDomain(t *testing.T, ns, name string, numNodes int, mode string) *cdv1beta1.ComputeDomain {
	t.Helper()
	w := testutil.MakeComputeDomain(name).Namespace(ns).NumNodes(numNodes).ClaimTemplate(name)
	if mode != "" {
		w = w.AllocationMode(mode)
	}
	cd := w.Obj()
	must(t, c.Create(ctx(), cd))
	return cd
}

// job is an Indexed Job of pods pods, one per node (anti-affinity), claiming the domain's
// channel; runFor > 0 makes each no-op container exit 0 after it, so the job completes.
// racks, when given, pins the pods to those racks.
func job(t *testing.T, ns, name, template string, pods int, runFor time.Duration, racks ...string) *batchv1.Job {
	t.Helper()
	j := jobObject(ns, name, template, pods, runFor, racks...)
	must(t, c.Create(ctx(), j))
	return j
}

func jobObject(ns, name, template string, pods int, runFor time.Duration, racks ...string) *batchv1.Job {
	labels := map[string]string{"job": name}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelHostname,
				}},
			}},
			Containers: []corev1.Container{{
				Name: "ctr", Image: "ubuntu:24.04", Command: []string{"bash", "-c"},
				Args:      []string{"ls -la /dev/nvidia-caps-imex-channels; sleep 9999"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "imex"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "imex", ResourceClaimTemplateName: &template}},
		},
	}
	if runFor > 0 {
		tmpl.Annotations["sim.cdplane.io/run-for"] = runFor.String()
	}
	if len(racks) > 0 {
		tmpl.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "sim.cdplane.io/rack", Operator: corev1.NodeSelectorOpIn, Values: racks,
			}}}},
		}}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			Completions: ptr.To(int32(pods)), Parallelism: ptr.To(int32(pods)),
			CompletionMode: ptr.To(batchv1.IndexedCompletion), BackoffLimit: ptr.To(int32(6)),
			Template: tmpl,
		},
	}
}

// workerPod runs a no-op workload pod on node claiming the domain's channel (a claim of its
// own from the template).
func workerPod(t *testing.T, ns, name, template, node string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"worker": "true"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers: []corev1.Container{{
				Name: "ctr", Image: "ubuntu:24.04", Command: []string{"sleep", "9999"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "imex"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "imex", ResourceClaimTemplateName: &template}},
		},
	}
	must(t, c.Create(ctx(), p))
	return p
}

// waitPodRunning waits until the pod runs and is Ready, and returns it.
func waitPodRunning(t *testing.T, p *corev1.Pod, timeout time.Duration) *corev1.Pod {
	t.Helper()
	cur := &corev1.Pod{}
	testutil.Eventually(t, timeout, fmt.Sprintf("pod %s/%s Running and Ready", p.Namespace, p.Name), func() (bool, error) {
		if err := c.Get(ctx(), client.ObjectKeyFromObject(p), cur); err != nil {
			return false, err
		}
		return cur.Status.Phase == corev1.PodRunning && podutils.IsPodReady(cur), nil
	})
	return cur
}

func getCD(t *testing.T, cd *cdv1beta1.ComputeDomain) *cdv1beta1.ComputeDomain {
	t.Helper()
	cur := &cdv1beta1.ComputeDomain{}
	must(t, c.Get(ctx(), client.ObjectKeyFromObject(cd), cur))
	return cur
}

// waitStatus waits for the domain's status.status (what `kubectl get computedomains` shows).
func waitStatus(t *testing.T, cd *cdv1beta1.ComputeDomain, want string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, fmt.Sprintf("ComputeDomain %s/%s %s", cd.Namespace, cd.Name, want), func() (bool, error) {
		cur := &cdv1beta1.ComputeDomain{}
		if err := c.Get(ctx(), client.ObjectKeyFromObject(cd), cur); err != nil {
			return false, err
		}
		return cur.Status.Status == want, nil
	})
}

// jobPods returns the job's pods.
func jobPods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	must(t, c.List(ctx(), pods, client.InNamespace(ns), client.MatchingLabels{"job": name}))
	return pods.Items
}

// waitRunning waits until n pods of the job run and are Ready.
func waitRunning(t *testing.T, ns, name string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var running []corev1.Pod
	testutil.Eventually(t, timeout, fmt.Sprintf("%d pods of job %s Running", n, name), func() (bool, error) {
		running = nil
		for _, p := range jobPods(t, ns, name) {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && podutils.IsPodReady(&p) {
				running = append(running, p)
			}
		}
		return len(running) >= n, nil
	})
	return running
}

// waitComplete waits for the job to complete.
func waitComplete(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, "job "+name+" complete", func() (bool, error) {
		j := &batchv1.Job{}
		if err := c.Get(ctx(), client.ObjectKey{Namespace: ns, Name: name}, j); err != nil {
			return false, err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("job failed: %s", cond.Message)
			}
		}
		return j.Status.Succeeded == *j.Spec.Completions, nil
	})
}

// logs returns a container's log through the apiserver, as `kubectl logs` does.
func logs(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	rc, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).Stream(ctx())
	must(t, err)
	defer rc.Close()
	data, err := io.ReadAll(rc)
	must(t, err)
	return string(data)
}

// channelDevices returns the channel device paths a no-op container's log records.
func channelDevices(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "DEVICE" && strings.HasPrefix(f[1], "/dev/nvidia-caps-imex-channels/") {
			out = append(out, f[1])
		}
	}
	sort.Strings(out)
	return out
}

// daemonPods returns the domain's daemon pods (in its plane's driver namespace).
func daemonPods(t *testing.T, id string, cd *cdv1beta1.ComputeDomain) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	must(t, c.List(ctx(), pods, client.InNamespace(plane.Name(id, plane.DriverNamespaceLegacyName)),
		client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}))
	return pods.Items
}

func deleteAndWait(t *testing.T, obj client.Object, opts ...client.DeleteOption) {
	t.Helper()
	must(t, client.IgnoreNotFound(c.Delete(ctx(), obj, opts...)))
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("%s gone", obj.GetName()), func() (bool, error) {
		err := c.Get(ctx(), client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
