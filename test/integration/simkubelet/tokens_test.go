package simkubelet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"cdplane/internal/testutil"
)

// TestOneTokenPerPod: a pod's service-account token is requested once, as a kubelet's token
// manager does: the credentials directory and the projected volume the ServiceAccount admission
// plugin adds (here written into the pod) share it, and a set-up tried again (a ConfigMap volume
// whose ConfigMap does not exist yet) writes the token it has rather than requesting another.
// Every TokenRequest answers a different token, so a second request shows as a changed file.
func TestOneTokenPerPod(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	ns := testCluster.Namespace(t, nil)
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runner"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := podOn(ns, "tokens", nodeA, "example.com/app:v1")
	pod.Spec.ServiceAccountName = "runner"
	// The volume the ServiceAccount admission plugin adds (not enabled on this apiserver).
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "late", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "late"}}}},
		{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3607))}},
		}}}},
	}
	projected := filepath.Join("kube-api-access", "token")
	created := createPod(t, pod)
	podDir := filepath.Join(sim.NodeDir(nodeA), "var/lib/kubelet/pods", string(created.UID))
	credentials := filepath.Join(podDir, "serviceaccount", "token")

	// The credentials are written before the volumes: the first set-up writes the token, then
	// fails on the missing ConfigMap, and is tried again.
	var first []byte
	testutil.Eventually(t, 60*time.Second, "the pod's first token", func() (bool, error) {
		var err error
		first, err = os.ReadFile(credentials)
		return err == nil && len(first) > 0, nil
	})
	testutil.Eventually(t, 60*time.Second, "the set-up failing twice", func() (bool, error) {
		evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.SelectorFromSet(fields.Set{
			"involvedObject.name": pod.Name, "reason": "FailedMount"}).String()})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Count >= 2 {
				return true, nil
			}
		}
		return false, fmt.Errorf("%d FailedMount events, none counted twice", len(evs.Items))
	})
	if got, _ := os.ReadFile(credentials); !bytes.Equal(got, first) {
		t.Error("the set-up tried again requested a new token for the credentials")
	}

	if _, err := kube.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "late"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, pod.Name, 60*time.Second, "pod running", running)
	for what, path := range map[string]string{"credentials": credentials, "projected volume": filepath.Join(podDir, "volumes", projected)} {
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, first) {
			t.Errorf("%s token (%v): not the pod's first token", what, err)
		}
	}
}
