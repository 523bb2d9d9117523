package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// TestLeaderFailoverWhileDomainsJoin: a plane runs two controller replicas (the chart's
// default). The lease names the leading pod. While a 2-rack domain's daemons are joining, the
// leader is killed (its pod force-deleted: SIGKILL, no lease release, as in a crash); another
// replica takes the lease once it expires, every node that had joined keeps its index, the
// others join, the domain turns Ready and its job completes, and the apiserver answered no
// write to ComputeDomains or cliques with a conflict (409) from the kill to the end.
func TestLeaderFailoverWhileDomainsJoin(t *testing.T) {
	e2eOnly(t)
	const id = planeA
	waitPlanesIdle(t, id)
	driverNS := plane.Name(id, plane.DriverNamespaceLegacyName)
	leaseName := plane.Name(id, "cdplane-controller")

	var leader corev1.Pod
	var others []string
	testutil.Eventually(t, 2*time.Minute, "two controller replicas Ready and the lease naming one of them", func() (bool, error) {
		pods, err := controllerPods(driverNS)
		if err != nil || len(pods) != 2 {
			return false, err
		}
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx(), client.ObjectKey{Namespace: driverNS, Name: leaseName}, lease); err != nil {
			return false, err
		}
		holder := ptrValue(lease.Spec.HolderIdentity)
		others = nil
		found := false
		for _, p := range pods {
			if !podutils.IsPodReady(&p) {
				return false, fmt.Errorf("controller pod %s not Ready", p.Name)
			}
			if p.Name == holder {
				leader, found = p, true
			} else {
				others = append(others, p.Name)
			}
		}
		if !found {
			return false, fmt.Errorf("lease holder %q is none of the controller pods", holder)
		}
		return true, nil
	})
	t.Logf("lease %s/%s held by pod %s; standby %v", driverNS, leaseName, leader.Name, others)

	ns := namespace(t, id)
	cd := computeDomain(t, ns, "cd", 4, "")
	imexJob(t, ns, "worker", cd, 4, planeRacks(t, id)...)
	// Kill the leader while daemons join: as soon as the controller lists a first node.
	var joined map[string]member
	testutil.Eventually(t, 3*time.Minute, "a first node of the domain listed by the controller", func() (bool, error) {
		m, _, err := domainMembers(id, cd)
		joined = m
		return err == nil && len(m) > 0, err
	})
	requestsBefore := domainRequests(t)
	killed := time.Now()
	must(t, c.Delete(ctx(), &leader, client.GracePeriodSeconds(0)))
	t.Logf("killed leader %s with %d of 4 nodes listed: %v", leader.Name, len(joined), sortedMembers(joined))

	var lease coordinationv1.Lease
	testutil.Eventually(t, 3*time.Minute, "another replica holding the lease", func() (bool, error) {
		if err := c.Get(ctx(), client.ObjectKey{Namespace: driverNS, Name: leaseName}, &lease); err != nil {
			return false, err
		}
		h := ptrValue(lease.Spec.HolderIdentity)
		return h != "" && h != leader.Name, nil
	})
	holder := ptrValue(lease.Spec.HolderIdentity)
	took := "unknown"
	if lease.Spec.AcquireTime != nil {
		took = lease.Spec.AcquireTime.Sub(killed).Round(100 * time.Millisecond).String()
	}
	kind := "the standby replica"
	if !slices.Contains(others, holder) {
		kind = "the killed pod's replacement"
	}
	t.Logf("lease taken by %s (%s) %s after the kill; lease duration %ds", holder, kind, took, ptrValue(lease.Spec.LeaseDurationSeconds))

	waitRunning(t, ns, "worker", 4, 3*time.Minute)
	workers := runningWorkers(t, ns)
	after, _ := waitMembership(t, id, cd, podNodes(workers), 3*time.Minute)
	checkIndexesKept(t, joined, after, keys(joined))
	waitStatus(t, cd, cdv1beta1.StatusReady, 2*time.Minute)
	checkIMEXConnected(t, id, cd)
	releaseIMEXJob(t, id, ns, "worker", cd)
	waitComplete(t, ns, "worker", 3*time.Minute)
	checkIMEXJobLogs(t, ns, "worker")
	// The apiserver's counts since the kill: no 409, and, as a control that the counts are
	// read at all (a renamed metric or label would read as zero conflicts), the status writes
	// that made the domain Ready.
	d := domainRequests(t).since(requestsBefore)
	t.Logf("requests on ComputeDomains and cliques since the kill: %d writes answered 2xx, %d answered 409", d.writes, d.conflicts)
	if d.conflicts != 0 {
		t.Errorf("the apiserver answered %d writes to ComputeDomains or cliques with 409 Conflict after the leader was killed; want none", d.conflicts)
	}
	if d.writes == 0 {
		t.Errorf("the apiserver's metrics show no successful write to ComputeDomains or cliques since the kill, yet the domain became Ready: its request counts are not being read")
	}
	// The plane is whole again for the scenarios that follow.
	testutil.Eventually(t, 2*time.Minute, "two controller replicas Ready again", func() (bool, error) {
		pods, err := controllerPods(driverNS)
		if err != nil || len(pods) != 2 {
			return false, err
		}
		return podutils.IsPodReady(&pods[0]) && podutils.IsPodReady(&pods[1]), nil
	})
}

// controllerPods lists a plane's controller pods that are not being deleted.
func controllerPods(driverNS string) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx(), pods, client.InNamespace(driverNS), client.MatchingLabels{"app.kubernetes.io/name": "cdplane-controller"}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
