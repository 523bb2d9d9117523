package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/testutil"
)

// nvidiaObjects creates, by hand and in the shapes NVIDIA's published templates give them, what
// NVIDIA's controller and daemons leave for a ComputeDomain: in their driver namespace the daemon
// DaemonSet computedomain-daemon-<uid>, its claim template and a clique written by a daemon, and
// in the domain's namespace the channel claim template named in the spec; each labelled with the
// domain's UID and, but the clique, carrying the domain finalizer.
func nvidiaObjects(t *testing.T, e *env, nvNS string, cd *cdv1beta1.ComputeDomain) []client.Object {
	t.Helper()
	uid := string(cd.UID)
	label := map[string]string{cdv1beta1.ComputeDomainLabel: uid}
	target := func(v string) map[string]string {
		return map[string]string{cdv1beta1.ComputeDomainLabel: uid, "resource.nvidia.com/computeDomainTarget": v}
	}
	ds := testutil.MakeDaemonSet("computedomain-daemon-"+uid, nvNS).Selector(cdv1beta1.ComputeDomainLabel, uid).
		Containers(testutil.MakePod("x", nvNS).Obj().Spec.Containers...).Obj()
	ds.Labels, ds.Finalizers = label, []string{cdv1beta1.Finalizer}
	template := func(ns, name, class string, labels map[string]string) *resourcev1.ResourceClaimTemplate {
		return &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Finalizers: []string{cdv1beta1.Finalizer}},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}},
			}}},
		}
	}
	clique := testutil.MakeClique(uid+".nvidia-clique.1", nvNS).Obj()
	clique.Labels = map[string]string{cdv1beta1.ComputeDomainLabel: uid, cdv1beta1.CliqueIDLabel: "nvidia-clique.1"}
	objs := []client.Object{
		ds,
		template(nvNS, "computedomain-daemon-"+uid, cdv1beta1.DaemonDeviceClass, target("Daemon")),
		template(cd.Namespace, cd.Spec.Channel.ResourceClaimTemplate.Name, cdv1beta1.ChannelDeviceClass, target("Workload")),
		clique,
	}
	for _, o := range objs {
		if err := e.c.Create(e.ctx(), o); err != nil {
			t.Fatalf("creating NVIDIA's %T %s: %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	return objs
}

// TestTakeOverFromNVIDIA: ComputeDomains created while NVIDIA's controller ran, found by a plane
// told to take over from NVIDIA's namespace. A live one reaches Ready under cdplane: NVIDIA's
// objects for it are unfinalized and deleted, cdplane's take their place. One deleted before
// cdplane ever reconciled it goes cleanly, NVIDIA's objects with it. Another domain, which this
// plane does not take over, has everything NVIDIA left for it in the same namespaces (the
// finalizer on the domain, the DaemonSet, both claim templates, a clique): not one of them is
// written or deleted (same resourceVersions).
func TestTakeOverFromNVIDIA(t *testing.T) {
	t.Parallel()
	nvNS := testCluster.Namespace(t, nil)
	e := newEnv(t, true, func(o *controller.Options) { o.TakeOverFrom = nvNS })
	e.stopMgr() // NVIDIA's controller "runs": cdplane's is not there yet

	live, gone := e.createCD("live", 1), e.createCD("gone", 1)
	// Another domain in the same namespace, NVIDIA's still: not selected by this plane.
	other := testutil.MakeComputeDomain("other").Namespace(e.ns).NumNodes(1).Obj()
	if err := e.c.Create(e.ctx(), other); err != nil {
		t.Fatal(err)
	}
	for _, cd := range []*cdv1beta1.ComputeDomain{live, gone, other} {
		cur := e.getCD(cd)
		cur.Finalizers = []string{cdv1beta1.Finalizer} // as NVIDIA's controller set it
		if err := e.c.Update(e.ctx(), cur); err != nil {
			t.Fatal(err)
		}
		cur.Status = cdv1beta1.ComputeDomainStatus{Status: cdv1beta1.StatusReady, Nodes: []cdv1beta1.ComputeDomainNode{
			{Name: "nvidia-node", IPAddress: "10.0.0.9", CliqueID: "nvidia-clique.1", Index: 0, Status: cdv1beta1.StatusReady}}}
		if err := e.c.Status().Update(e.ctx(), cur); err != nil {
			t.Fatal(err)
		}
	}
	liveObjs, goneObjs := nvidiaObjects(t, e, nvNS, live), nvidiaObjects(t, e, nvNS, gone)
	otherObjs := append([]client.Object{&cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: other.Namespace, Name: other.Name}}},
		nvidiaObjects(t, e, nvNS, other)...)
	// NVIDIA's controller would take its finalizers off; here the test does, so that the
	// namespaces can go.
	t.Cleanup(func() { removeFinalizers(t, e, otherObjs) })
	otherVersions := versionsOf(t, e, otherObjs)
	if err := e.c.Delete(e.ctx(), gone); err != nil {
		t.Fatal(err)
	}

	e.startManager(true)
	node := e.addNode(live, "t1")
	e.startDaemon(live, node, testClique)
	got := e.waitStatus(live, cdv1beta1.StatusReady, 60*time.Second)
	if _, ok := entryOf(got, "nvidia-node"); ok || len(got.Status.Nodes) != 1 {
		t.Errorf("status after the take-over: %+v, want only cdplane's node", got.Status.Nodes)
	}
	for _, o := range append(liveObjs, goneObjs...) {
		// Gone, or another object of its name: cdplane's channel template takes the name.
		e.eventually(2*time.Minute, "NVIDIA's "+client.ObjectKeyFromObject(o).String()+" gone", func() (bool, error) {
			cur := o.DeepCopyObject().(client.Object)
			err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(o), cur)
			return apierrors.IsNotFound(err) || (err == nil && cur.GetUID() != o.GetUID()), client.IgnoreNotFound(err)
		})
	}
	e.eventually(2*time.Minute, "the domain deleted before the take-over is gone", func() (bool, error) {
		err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(gone), &cdv1beta1.ComputeDomain{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	wl := &resourcev1.ResourceClaimTemplate{}
	if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: live.Namespace, Name: live.Spec.Channel.ResourceClaimTemplate.Name}, wl); err != nil {
		t.Fatal(err)
	}
	if wl.Labels["app.kubernetes.io/managed-by"] != "cdplane" {
		t.Errorf("the channel template after the take-over: labels %v, want cdplane's", wl.Labels)
	}
	ds := &appsv1.DaemonSet{}
	if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.driverNS, Name: "computedomain-daemon-" + string(live.UID)}, ds); err != nil {
		t.Errorf("cdplane's DaemonSet: %v", err)
	}
	after := versionsOf(t, e, otherObjs)
	for key, rv := range otherVersions {
		if after[key] != rv {
			t.Errorf("%s, of another domain, which this plane does not take over: resourceVersion %s -> %s, want it untouched", key, rv, after[key])
		}
	}
	if c := findCondition(e.getCD(live).Status.Conditions, cdv1beta1.ConditionResourcesCreated); c == nil || c.Status != metav1.ConditionTrue || strings.Contains(c.Message, "clash") {
		t.Errorf("ResourcesCreated after the take-over: %+v", c)
	}
}

// versionsOf reads each object's resourceVersion, keyed by its kind and name ("gone" for an
// object that is no longer there).
func versionsOf(t *testing.T, e *env, objs []client.Object) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range objs {
		cur := o.DeepCopyObject().(client.Object)
		key := fmt.Sprintf("%T %s", o, client.ObjectKeyFromObject(o))
		switch err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(o), cur); {
		case apierrors.IsNotFound(err):
			out[key] = "gone"
		case err != nil:
			t.Fatal(err)
		default:
			out[key] = cur.GetResourceVersion()
		}
	}
	return out
}

// removeFinalizers takes every finalizer off the objects that are still there.
func removeFinalizers(t *testing.T, e *env, objs []client.Object) {
	t.Helper()
	for _, o := range objs {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		if err := e.c.Patch(context.Background(), o.DeepCopyObject().(client.Object), patch); client.IgnoreNotFound(err) != nil {
			t.Errorf("removing the finalizers of %T %s: %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}
