package planes

import (
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	cdv1beta1 "cdplane/api/v1beta1"
	charts "cdplane/deployments/helm"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

// installPlaneRights creates what the plane chart gives plane id's components: its driver
// namespace, its service accounts, and the objects of the given templates (RBAC and admission
// policies), as `cdplane install plane` would.
func installPlaneRights(t *testing.T, id string, templates ...string) (driverNS string) {
	t.Helper()
	ctx := testContext(t)
	release, ns := lifecycle.PlaneRelease(id)
	ms, err := charts.Render(charts.Plane, release, ns, testutil.WithImage(map[string]any{"controlPlaneID": id}))
	if err != nil {
		t.Fatal(err)
	}
	if err := testCluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: plane.Stamp(id, nil)}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, m := range ms {
		o := m.Object
		wanted := o.GetKind() == "ServiceAccount"
		for _, tmpl := range templates {
			wanted = wanted || strings.HasSuffix(m.Template, "/"+tmpl)
		}
		if !wanted {
			continue
		}
		if err := testCluster.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: creating %s %s: %v", m.Template, o.GetKind(), o.GetName(), err)
		}
	}
	return ns
}

// checkAdmission fails the test unless err is nil (want "": admitted) or an admission refusal
// whose message contains want.
func checkAdmission(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v, want admitted", what, err)
	case want != "" && (!isAdmissionRefusal(err) || !strings.Contains(err.Error(), want)):
		t.Errorf("%s: %v, want an admission refusal containing %q", what, err, want)
	}
}

// eventuallyRefused retries attack until admission refuses it: the apiserver enforces a new
// policy once it has loaded it.
func eventuallyRefused(t *testing.T, what string, attack func() error) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "admission to refuse "+what, func() (bool, error) {
		err := attack()
		return isAdmissionRefusal(err), err
	})
}

// podBoundClient authenticates as service account sa with a token bound to pod, as the kubelet
// gives a pod's containers.
func podBoundClient(t *testing.T, ns, sa string, pod *corev1.Pod) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(testCluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}
	if pod != nil {
		spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(testContext(t), sa, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(&rest.Config{Host: testCluster.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: testCluster.Config.CAData}, BearerToken: tr.Status.Token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func cliquePatch(key, value string) []byte {
	return fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, key, value)
}

// A leaked daemon token is the least privileged identity of a plane, on every node in use. RBAC
// lets it patch pods in the driver namespace; admission must hold it to the clique label of the
// one pod its token is bound to, so that it cannot swap the image of the privileged plugin pods.
func TestDaemonTokenChangesOnlyItsOwnPodsCliqueLabel(t *testing.T) {
	ctx := testContext(t)
	const id = "dpol"
	ns := installPlaneRights(t, id, "rbac-daemon.yaml", "policy-daemon.yaml")
	sa := plane.Name(id, "cdplane-daemon")
	mkPod := func(name, account string) *corev1.Pod {
		p := testutil.MakePod(name, ns).ServiceAccount(account).Image("cdplane:1").Obj()
		if err := testCluster.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := mkPod("daemon-0", sa)
	plugin := mkPod("kubelet-plugin-0", plane.Name(id, "cdplane-kubelet-plugin"))
	daemon := podBoundClient(t, ns, sa, own)
	pods := daemon.CoreV1().Pods(ns)

	// The policy is enforced once the apiserver has loaded it: wait until the daemon's token is
	// refused the plugin pod (the attack), then check each case.
	attack := func() error {
		_, err := pods.Patch(ctx, plugin.Name, types.StrategicMergePatchType,
			[]byte(`{"spec":{"containers":[{"name":"main","image":"attacker/evil:1"}]}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	eventuallyRefused(t, "patching the plugin pod with the daemon's token", attack)

	for name, tc := range map[string]struct {
		pod   string
		patch []byte
		typ   types.PatchType
		want  string // "" allowed, else a substring of the refusal
	}{
		"own pod's clique label":       {pod: own.Name, patch: cliquePatch(cdv1beta1.CliqueIDLabel, "u.1"), typ: types.MergePatchType},
		"own pod's other label":        {pod: own.Name, patch: cliquePatch(cdv1beta1.ComputeDomainLabel, "forged"), typ: types.MergePatchType, want: "only set its clique and IMEX-blocked labels"},
		"own pod's image":              {pod: own.Name, patch: []byte(`{"spec":{"containers":[{"name":"main","image":"attacker/evil:1"}]}}`), typ: types.StrategicMergePatchType, want: "only set its clique and IMEX-blocked labels"},
		"own pod's annotation":         {pod: own.Name, patch: []byte(`{"metadata":{"annotations":{"a":"b"}}}`), typ: types.MergePatchType, want: "only set its clique and IMEX-blocked labels"},
		"plugin pod's clique label":    {pod: plugin.Name, patch: cliquePatch(cdv1beta1.CliqueIDLabel, "u.1"), typ: types.MergePatchType, want: "only change its own pod"},
		"plugin pod's image":           {pod: plugin.Name, patch: []byte(`{"spec":{"containers":[{"name":"main","image":"attacker/evil:1"}]}}`), typ: types.StrategicMergePatchType, want: "only change its own pod"},
		"own pod's clique label back":  {pod: own.Name, patch: cliquePatch(cdv1beta1.CliqueIDLabel, ""), typ: types.MergePatchType},
		"own pod's IMEX-blocked label": {pod: own.Name, patch: cliquePatch(cdv1beta1.IMEXBlockedLabel, cdv1beta1.IMEXBlockedHostIMEXInUse), typ: types.MergePatchType},
		"plugin pod's IMEX-blocked label": {pod: plugin.Name, patch: cliquePatch(cdv1beta1.IMEXBlockedLabel, cdv1beta1.IMEXBlockedHostIMEXInUse), typ: types.MergePatchType,
			want: "only change its own pod"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pods.Patch(ctx, tc.pod, tc.typ, tc.patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			checkAdmission(t, name, err, tc.want)
		})
	}

	// Deleting the plugin pod (a denial of service) and a token bound to no pod are refused.
	if err := pods.Delete(ctx, plugin.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
		t.Error("the daemon's token may delete the plugin pod")
	}
	unbound := podBoundClient(t, ns, sa, nil).CoreV1().Pods(ns)
	if _, err := unbound.Patch(ctx, own.Name, types.MergePatchType, cliquePatch(cdv1beta1.CliqueIDLabel, "u.1"),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); !isAdmissionRefusal(err) {
		t.Errorf("a daemon token bound to no pod patched a pod: %v", err)
	}

	// Nothing changed on the plugin pod.
	got := &corev1.Pod{}
	if err := testCluster.Client.Get(ctx, keyOf(plugin), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Containers[0].Image != "cdplane:1" || got.ResourceVersion != plugin.ResourceVersion {
		t.Errorf("the plugin pod changed: image %s, resourceVersion %s -> %s", got.Spec.Containers[0].Image, plugin.ResourceVersion, got.ResourceVersion)
	}
}

func keyOf(p *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}

// isAdmissionRefusal reports a refusal by an admission policy (RBAC allowed the request).
func isAdmissionRefusal(err error) bool {
	return err != nil && apierrors.IsForbidden(err) && strings.Contains(err.Error(), "denied request")
}
