package e2e

import (
	"cdplane/internal/lifecycle"
	"cdplane/internal/sim/imexsim"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
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
		_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	return name
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
			t.Logf("pod %s/%s on %s: %s ready=%v", n, p.Name, p.Spec.NodeName, p.Status.Phase, podReady(&p))
		}
	}
	evs, _ := cs.CoreV1().Events(ns).List(ctx(), metav1.ListOptions{})
	for _, e := range evs.Items {
		t.Logf("event %s %s: %s %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
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
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			Completions: ptr.To(int32(pods)), Parallelism: ptr.To(int32(pods)),
			CompletionMode: ptr.To(batchv1.IndexedCompletion), BackoffLimit: ptr.To(int32(6)),
			Template: tmpl,
		},
	}
	must(t, c.Create(ctx(), j))
	return j
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
	eventually(t, timeout, fmt.Sprintf("ComputeDomain %s/%s %s", cd.Namespace, cd.Name, want), func() (bool, error) {
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
	eventually(t, timeout, fmt.Sprintf("%d pods of job %s Running", n, name), func() (bool, error) {
		running = nil
		for _, p := range jobPods(t, ns, name) {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && podReady(&p) {
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
	eventually(t, timeout, "job "+name+" complete", func() (bool, error) {
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

// checkIMEXPeers asserts that every Ready daemon's simulated IMEX has as peers exactly the
// other daemons of its clique (their pod IPs), as the clique objects list them — or, for a
// domain kept without cliques, as its status.nodes lists them, grouped by clique id.
func checkIMEXPeers(t *testing.T, id string, cd *cdv1beta1.ComputeDomain) {
	t.Helper()
	eventually(t, time.Minute, "simulated IMEX peers match clique membership", func() (bool, error) {
		cliques := &cdv1beta1.ComputeDomainCliqueList{}
		if err := c.List(ctx(), cliques, client.InNamespace(plane.Name(id, plane.DriverNamespaceLegacyName)),
			client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cd.UID)}); err != nil {
			return false, err
		}
		type member struct{ NodeName, IPAddress string }
		var members [][]member
		for _, cl := range cliques.Items {
			var m []member
			for _, d := range cl.Daemons {
				m = append(m, member{d.NodeName, d.IPAddress})
			}
			members = append(members, m)
		}
		if len(members) == 0 {
			cur := &cdv1beta1.ComputeDomain{}
			if err := c.Get(ctx(), client.ObjectKeyFromObject(cd), cur); err != nil {
				return false, err
			}
			byClique := map[string][]member{}
			for _, n := range cur.Status.Nodes {
				byClique[n.CliqueID] = append(byClique[n.CliqueID], member{n.Name, n.IPAddress})
			}
			for _, m := range byClique {
				members = append(members, m)
			}
		}
		if len(members) == 0 {
			return false, nil
		}
		for _, daemons := range members {
			ips := map[string]string{}
			for _, d := range daemons {
				ips[d.NodeName] = d.IPAddress
			}
			for _, d := range daemons {
				cfg, err := imexConfig(d.NodeName, string(cd.UID))
				if err != nil || cfg == "" {
					return false, err
				}
				st, err := imexsim.Query(ctx(), cfg)
				if err != nil {
					return false, nil // not serving yet
				}
				var got, want []string
				for _, p := range st.Peers {
					if h, _, err := net.SplitHostPort(p); err == nil {
						p = h
					}
					got = append(got, p)
				}
				for node, ip := range ips {
					if node != d.NodeName {
						want = append(want, ip)
					}
				}
				sort.Strings(got)
				sort.Strings(want)
				if strings.Join(got, ",") != strings.Join(want, ",") {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// imexConfig finds the domain's IMEX config file on a simulated node.
func imexConfig(node, uid string) (string, error) {
	root := filepath.Join(stateDir, "nodes", node)
	var found string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil //nolint:nilerr // directories come and go while the sim runs
		}
		if !d.IsDir() && d.Name() == "imexd.cfg" && strings.Contains(p, uid) {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	return found, err
}

func deleteAndWait(t *testing.T, obj client.Object, opts ...client.DeleteOption) {
	t.Helper()
	must(t, client.IgnoreNotFound(c.Delete(ctx(), obj, opts...)))
	eventually(t, 2*time.Minute, fmt.Sprintf("%s gone", obj.GetName()), func() (bool, error) {
		err := c.Get(ctx(), client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
