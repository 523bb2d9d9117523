package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// A claim left PrepareStarted by a plugin that stopped mid-prepare, and deleted while the plugin
// was away, is cleaned when the plugin starts again: its node label and CDI spec go and the
// checkpoint no longer holds it as started. The spec is the file at the path the plugin writes
// the claim's spec to (its --cdi-root on the node): a prepare that stopped after writing the
// spec and before checkpointing PrepareCompleted leaves it there, and the test puts it there
// while the plugin is away, as such a prepare would have, so that its removal is observed.
//
// How the scenario gets there, with ordinary cluster operations: a ResourceQuota in the
// plane's driver namespace keeps new pods out of it, so the domain's daemon never starts and the
// workload's channel prepare stays PrepareStarted (it labels the node, then waits for the
// daemon); the plugin pod on the node is deleted and, under the quota, not recreated; the
// workload pod is force-deleted and its claim goes; the quota is removed and the DaemonSet
// brings the plugin back.
func TestStalePrepareStartedCleanedAfterPluginRestart(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeA)
	ns := namespace(t, planeA)
	driverNS := plane.Name(planeA, plane.DriverNamespaceLegacyName)
	// waitPlanesIdle: the plane runs no daemon and no node of it serves a domain, so the quota
	// below is not freed by other pods leaving and the node is free for this domain.
	node := planeNodes(planeA, -1)[0]
	cd := computeDomain(t, ns, "cd", 1, "")

	// The quota: no new pod in the driver namespace once the plugin pod on node is gone. Pods
	// of earlier scenarios still terminating would free room when they go: wait for them.
	pods := &corev1.PodList{}
	testutil.Eventually(t, 2*time.Minute, "no terminating pod in "+driverNS, func() (bool, error) {
		if err := c.List(ctx(), pods, client.InNamespace(driverNS)); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return false, nil
			}
		}
		return true, nil
	})
	live := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live++
		}
	}
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-no-new-pods", Namespace: driverNS},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(live-1), resource.DecimalSI)}},
	}
	must(t, c.Create(ctx(), quota))
	removeQuota := func() { _ = client.IgnoreNotFound(c.Delete(ctx(), quota)) }
	t.Cleanup(removeQuota)
	testutil.Eventually(t, time.Minute, "the quota's usage to be counted", func() (bool, error) {
		cur := &corev1.ResourceQuota{}
		if err := c.Get(ctx(), client.ObjectKeyFromObject(quota), cur); err != nil {
			return false, err
		}
		_, ok := cur.Status.Used[corev1.ResourcePods]
		return ok, nil
	})

	template := "cd"
	worker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers: []corev1.Container{{
				Name: "ctr", Image: "ubuntu:24.04", Command: []string{"sleep", "9999"},
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "imex"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "imex", ResourceClaimTemplateName: &template}},
		},
	}
	must(t, c.Create(ctx(), worker))
	var claimUID types.UID
	var claimKey client.ObjectKey
	testutil.Eventually(t, 2*time.Minute, "the channel claim PrepareStarted in the plugin's checkpoint and the node labelled: "+node, func() (bool, error) {
		cur := &corev1.Pod{}
		if err := c.Get(ctx(), client.ObjectKeyFromObject(worker), cur); err != nil {
			return false, err
		}
		if len(cur.Status.ResourceClaimStatuses) == 0 || cur.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return false, nil
		}
		claim := &resourcev1.ResourceClaim{}
		claimKey = client.ObjectKey{Namespace: ns, Name: *cur.Status.ResourceClaimStatuses[0].ResourceClaimName}
		if err := c.Get(ctx(), claimKey, claim); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		claimUID = claim.UID
		// PrepareStarted is checkpointed first, then the node labelled.
		e, ok, err := checkpointEntry(t, node, claimUID)
		return ok && e.State == kubeletplugin.PrepareStarted && nodeHasDomainLabel(t, node, cd), err
	})

	// The plugin goes away and stays away (the quota).
	plugin := pluginPod(t, driverNS, node)
	if plugin == nil {
		t.Fatalf("no kubelet plugin pod on %s", node)
	}
	spec := cdiSpecPath(t, node, claimUID)
	deleteAndWait(t, plugin)
	must(t, c.Delete(ctx(), worker, client.GracePeriodSeconds(0)))
	testutil.Eventually(t, 2*time.Minute, "the workload's claim gone", func() (bool, error) {
		err := c.Get(ctx(), claimKey, &resourcev1.ResourceClaim{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if p := pluginPod(t, driverNS, node); p != nil {
		t.Fatalf("a plugin pod %s came back on %s under the quota; the scenario needs it away", p.Name, node)
	}
	if e, ok, err := checkpointEntry(t, node, claimUID); err != nil || !ok || e.State != kubeletplugin.PrepareStarted {
		t.Fatalf("with the plugin away the claim's checkpoint entry is %+v (present %v, err %v), want PrepareStarted", e, ok, err)
	}
	// What a prepare stopped between writing the spec and checkpointing leaves behind.
	must(t, os.WriteFile(spec, fmt.Appendf(nil, `{"cdiVersion":"0.5.0","kind":%q,"devices":[{"name":%q,"containerEdits":{"deviceNodes":[{"path":"/dev/nvidia-caps-imex-channels/channel0"}]}}]}`,
		kubeletplugin.CDIKind, string(claimUID)+"-channel-0"), 0o644))

	// The plugin comes back and cleans up.
	removeQuota()
	testutil.Eventually(t, 3*time.Minute, "the stale claim cleaned on "+node, func() (bool, error) {
		e, ok, err := checkpointEntry(t, node, claimUID)
		if err != nil || (ok && e.State != kubeletplugin.PrepareAborted) {
			return false, err
		}
		if nodeHasDomainLabel(t, node, cd) {
			return false, fmt.Errorf("node %s still labelled for the domain", node)
		}
		switch _, err := os.Stat(spec); {
		case err == nil:
			return false, fmt.Errorf("CDI spec %s left behind", spec)
		case !errors.Is(err, os.ErrNotExist):
			return false, fmt.Errorf("CDI spec %s: %w", spec, err)
		}
		return true, nil
	})
	var restarted *corev1.Pod
	testutil.Eventually(t, 2*time.Minute, "the kubelet plugin back on "+node, func() (bool, error) {
		restarted = pluginPod(t, driverNS, node)
		return restarted != nil && restarted.UID != plugin.UID && podutils.IsPodReady(restarted), nil
	})
	if log := logs(t, restarted); !strings.Contains(log, "Claim left PrepareStarted is gone") {
		t.Errorf("the restarted plugin's log does not say it aborted the stale claim:\n%s", log)
	}
	t.Logf("claim %s: PrepareStarted, plugin %s deleted, claim deleted, plugin %s cleaned it", claimUID, plugin.Name, restarted.Name)
}

// checkpointEntry reads a claim's entry from the plugin's checkpoint on a simulated node.
func checkpointEntry(t *testing.T, node string, uid types.UID) (kubeletplugin.ClaimEntry, bool, error) {
	t.Helper()
	cp, err := checkpoint(t, node)
	e, ok := cp.Claims[uid]
	return e, ok, err
}

// checkpoint reads the plugin's checkpoint on node (in its --state-dir); an absent one is
// empty.
func checkpoint(t *testing.T, node string) (kubeletplugin.Checkpoint, error) {
	t.Helper()
	var cp kubeletplugin.Checkpoint
	path := filepath.Join(pluginHostPath(t, node, "--state-dir"), kubeletplugin.CheckpointFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return cp, err
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		return cp, fmt.Errorf("%s: %w", path, err)
	}
	return cp, nil
}

func nodeHasDomainLabel(t *testing.T, node string, cd *cdv1beta1.ComputeDomain) bool {
	t.Helper()
	n := &corev1.Node{}
	must(t, c.Get(ctx(), client.ObjectKey{Name: node}, n))
	return n.Labels[cdv1beta1.ComputeDomainLabel] == string(cd.UID)
}

// pluginPod returns the live kubelet plugin pod on node, or nil.
func pluginPod(t *testing.T, driverNS, node string) *corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	must(t, c.List(ctx(), pods, client.InNamespace(driverNS)))
	for i, p := range pods.Items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil && strings.Contains(p.Name, "kubelet-plugin") {
			return &pods.Items[i]
		}
	}
	return nil
}
