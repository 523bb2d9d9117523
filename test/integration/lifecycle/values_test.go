package lifecycle

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
)

// TestApplyKeepsTheReleasesValues: `apply` merges its values over those the release holds, so
// that an apply setting one value leaves every value set at install on the live objects; with
// --reset-values it starts from the chart's defaults. The same for the prerequisites.
func TestApplyKeepsTheReleasesValues(t *testing.T) {
	ctx := context.Background()
	m, out := lifecycleTest(t, "plane-v")

	must(t, m.InstallPrerequisites(ctx, map[string]any{"adminGroups": []any{"system:masters", "platform-admins"}}))
	must(t, m.ApplyPrerequisites(ctx, nil, lifecycle.KeepValues))
	if got := adminGroupsOfPolicy(t); !strings.Contains(got, "platform-admins") {
		t.Errorf("after an apply without values, the admission policy no longer names platform-admins among its admin groups (kept at install)")
	}
	must(t, m.ApplyPrerequisites(ctx, nil, lifecycle.ResetValues))
	if got := adminGroupsOfPolicy(t); strings.Contains(got, "platform-admins") {
		t.Errorf("after an apply with --reset-values, the admission policy still names platform-admins, want the default admin groups")
	}

	must(t, m.InstallPlane(ctx, "plane-v", map[string]any{
		"image":            map[string]any{"repository": "registry.example/cdplane", "tag": "1.2.3"},
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		"nvidiaDriverRoot": "/run/nvidia/driver",
		"logVerbosity":     4,
	}))
	must(t, m.ApplyPlane(ctx, "plane-v", map[string]any{"logVerbosity": 2}, lifecycle.KeepValues))
	ctrlPod, plugin := planeWorkloads(t, "plane-v")
	for what, ok := range map[string]bool{
		"controller image registry.example/cdplane:1.2.3":     ctrlPod.Spec.Template.Spec.Containers[0].Image == "registry.example/cdplane:1.2.3",
		"kubelet plugin image registry.example/cdplane:1.2.3": plugin.Spec.Template.Spec.Containers[0].Image == "registry.example/cdplane:1.2.3",
		"controller pull secret regcred":                      len(ctrlPod.Spec.Template.Spec.ImagePullSecrets) == 1 && ctrlPod.Spec.Template.Spec.ImagePullSecrets[0].Name == "regcred",
		"kubelet plugin driver root /run/nvidia/driver":       strings.Contains(strings.Join(plugin.Spec.Template.Spec.Containers[0].Args, " "), "--nvidia-driver-root=/run/nvidia/driver"),
		"controller at the new verbosity 2":                   strings.Contains(strings.Join(ctrlPod.Spec.Template.Spec.Containers[0].Args, " "), "--v=2"),
	} {
		if !ok {
			t.Errorf("after `apply plane --set logVerbosity=2` on a plane installed with other values: want %s (controller %v, plugin %v)",
				what, ctrlPod.Spec.Template.Spec.Containers[0], plugin.Spec.Template.Spec.Containers[0])
		}
	}
	if !strings.Contains(out.String(), "Keeping the values the release holds and this apply does not set (image.repository, image.tag, imagePullSecrets, nvidiaDriverRoot)") {
		t.Errorf("apply did not say which values it keeps; output:\n%s", out.String())
	}

	// From the chart's defaults, which have no image: refused until one is given.
	mustNot(t, m.ApplyPlane(ctx, "plane-v", map[string]any{"logVerbosity": 2}, lifecycle.ResetValues), "image.repository is not set")
	must(t, m.ApplyPlane(ctx, "plane-v", map[string]any{"logVerbosity": 2, "image": map[string]any{"repository": "other.example/cdplane"}}, lifecycle.ResetValues))
	ctrlPod, plugin = planeWorkloads(t, "plane-v")
	if img := ctrlPod.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(img, "other.example/cdplane:") || strings.HasSuffix(img, ":1.2.3") {
		t.Errorf("after --reset-values the controller's image is %s, want other.example/cdplane at the chart's default tag", img)
	}
	if len(ctrlPod.Spec.Template.Spec.ImagePullSecrets) != 0 || strings.Contains(strings.Join(plugin.Spec.Template.Spec.Containers[0].Args, " "), "/run/nvidia/driver") {
		t.Errorf("after --reset-values, values set at install remain: pull secrets %v, plugin args %v",
			ctrlPod.Spec.Template.Spec.ImagePullSecrets, plugin.Spec.Template.Spec.Containers[0].Args)
	}
}

// planeWorkloads reads plane id's controller Deployment and kubelet plugin DaemonSet.
func planeWorkloads(t *testing.T, id string) (*appsv1.Deployment, *appsv1.DaemonSet) {
	t.Helper()
	ns := plane.Name(id, plane.DriverNamespaceLegacyName)
	deps, dss := &appsv1.DeploymentList{}, &appsv1.DaemonSetList{}
	if err := testCluster.Client.List(context.Background(), deps, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := testCluster.Client.List(context.Background(), dss, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(deps.Items) != 1 || len(dss.Items) != 1 {
		t.Fatalf("plane %s has %d Deployments and %d DaemonSets, want one of each", id, len(deps.Items), len(dss.Items))
	}
	return &deps.Items[0], &dss.Items[0]
}

// adminGroupsOfPolicy returns the validations of the prerequisites' device-claims admission
// policy, where the chart writes its adminGroups.
func adminGroupsOfPolicy(t *testing.T) string {
	t.Helper()
	list := &admissionregistrationv1.ValidatingAdmissionPolicyList{}
	if err := testCluster.Client.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range list.Items {
		if !strings.Contains(p.Name, "device-claims") {
			continue
		}
		for _, v := range p.Spec.Validations {
			b.WriteString(v.Expression)
		}
		for _, v := range p.Spec.Variables {
			b.WriteString(v.Expression)
		}
	}
	if b.Len() == 0 {
		t.Fatal("no device-claims admission policy found")
	}
	return b.String()
}
