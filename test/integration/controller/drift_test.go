package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/testutil"
)

// startRecordingManager replaces e's controller manager with one (cliques on, e's options) whose
// write requests are recorded in log.
func (e *env) startRecordingManager(log *writeLog) {
	e.t.Helper()
	e.stopMgr()
	e.startManagerWith(true, log.wrap(testCluster.Config, "drift-test"))
}

// domainObjects are the keys of what the controller creates for a domain.
type domainObjects struct {
	ds, daemonTemplate, workloadTemplate client.ObjectKey
}

func (e *env) objectsOf(cd *cdv1beta1.ComputeDomain) domainObjects {
	name := cdv1beta1.DaemonSetName(string(cd.UID))
	return domainObjects{
		ds:               client.ObjectKey{Namespace: e.driverNS, Name: name},
		daemonTemplate:   client.ObjectKey{Namespace: e.driverNS, Name: name},
		workloadTemplate: client.ObjectKey{Namespace: cd.Namespace, Name: cd.Spec.Channel.ResourceClaimTemplate.Name},
	}
}

// waitCreated waits until the domain's DaemonSet and claim templates exist, each with its hash,
// and returns them.
func (e *env) waitCreated(cd *cdv1beta1.ComputeDomain) (*appsv1.DaemonSet, *resourcev1.ResourceClaimTemplate, *resourcev1.ResourceClaimTemplate) {
	e.t.Helper()
	keys := e.objectsOf(cd)
	ds, daemonRCT, workloadRCT := &appsv1.DaemonSet{}, &resourcev1.ResourceClaimTemplate{}, &resourcev1.ResourceClaimTemplate{}
	e.eventually(2*time.Minute, "the domain's DaemonSet and claim templates created", func() (bool, error) {
		for key, obj := range map[client.ObjectKey]client.Object{keys.ds: ds, keys.workloadTemplate: workloadRCT} {
			if err := e.c.Get(context.Background(), key, obj); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			if obj.GetAnnotations()[computedomain.DesiredHashAnnotation] == "" {
				return false, fmt.Errorf("%T %s has no hash annotation", obj, key)
			}
		}
		err := e.c.Get(context.Background(), keys.daemonTemplate, daemonRCT)
		return err == nil, client.IgnoreNotFound(err)
	})
	return ds, daemonRCT, workloadRCT
}

// editObject changes an object by hand, as an administrator would: read, change, update.
func editObject[T client.Object](e *env, key client.ObjectKey, obj T, change func(T)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.c.Get(e.ctx(), key, obj); err != nil {
			return err
		}
		change(obj)
		return e.c.Update(e.ctx(), obj)
	})
	if err != nil {
		e.t.Fatalf("editing %T %s by hand: %v", obj, key, err)
	}
}

// writesTo counts the recorded writes of one object (by method), the creating POST to its
// collection included.
func writesTo(log *writeLog, collection, name string) map[string]int {
	out := map[string]int{}
	for _, w := range log.list() {
		method, path, _ := strings.Cut(w, " ")
		if path == collection || path == collection+"/"+name {
			out[method]++
		}
	}
	return out
}

// TestDriftHandEditsAreRestored: every field the controller owns in a domain's DaemonSet and
// claim templates, changed by hand, is brought back; what others add (a label, the annotation
// of `kubectl rollout restart`) stays; the objects keep their UIDs. Objects as the real
// apiserver stores them (with its defaults) are not written again: a reconcile with nothing
// changed sends no write.
func TestDriftHandEditsAreRestored(t *testing.T) {
	t.Parallel()
	// With the daemons' metrics on: their container port as stored (protocol defaulted) is not
	// drift either.
	e := newEnv(t, true, func(o *controller.Options) { o.DaemonMetricsPort = 8082 })
	log := &writeLog{}
	e.startRecordingManager(log)
	cd := e.createCD("drift", 0)
	keys := e.objectsOf(cd)
	orig, _, workloadRCT := e.waitCreated(cd)
	dsCollection := "/apis/apps/v1/namespaces/" + e.driverNS + "/daemonsets"
	rctCollection := func(ns string) string { return "/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaimtemplates" }

	// Two hand edits of the workload template's hash, each restored in place: the second
	// restore's reconcile starts after the first one ended (one domain is never reconciled twice
	// at once), so every reconcile that could have rewritten the DaemonSet or the daemon
	// template has run by then.
	for i := range 2 {
		editObject(e, keys.workloadTemplate, &resourcev1.ResourceClaimTemplate{}, func(rct *resourcev1.ResourceClaimTemplate) {
			rct.Annotations[computedomain.DesiredHashAnnotation] = fmt.Sprintf("edited-%d", i)
		})
		e.eventually(2*time.Minute, "the workload template's hash restored in place", func() (bool, error) {
			got := &resourcev1.ResourceClaimTemplate{}
			err := e.c.Get(context.Background(), keys.workloadTemplate, got)
			return err == nil && got.UID == workloadRCT.UID &&
				got.Annotations[computedomain.DesiredHashAnnotation] == workloadRCT.Annotations[computedomain.DesiredHashAnnotation], err
		})
	}
	if diff := cmp.Diff(map[string]int{"POST": 1}, writesTo(log, dsCollection, keys.ds.Name)); diff != "" {
		t.Errorf("writes of the DaemonSet, stored as the apiserver defaults it, over reconciles with nothing to change (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"POST": 1}, writesTo(log, rctCollection(e.driverNS), keys.daemonTemplate.Name)); diff != "" {
		t.Errorf("writes of the daemon claim template over reconciles with nothing to change (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"POST": 1, "PUT": 2}, writesTo(log, rctCollection(e.ns), keys.workloadTemplate.Name)); diff != "" {
		t.Errorf("writes of the workload claim template: one create, one update per hand edit (-want +got):\n%s", diff)
	}

	// The claim template's spec cannot be changed, by hand or by the controller.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rct := &resourcev1.ResourceClaimTemplate{}
		if err := e.c.Get(e.ctx(), keys.daemonTemplate, rct); err != nil {
			return err
		}
		rct.Spec.Spec.Devices.Requests[0].Exactly.Selectors = nil
		return e.c.Update(e.ctx(), rct)
	})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("updating a claim template's spec: %v, want Invalid: field is immutable", err)
	}

	container := func(ds *appsv1.DaemonSet) *corev1.Container { return &ds.Spec.Template.Spec.Containers[0] }
	edits := []struct {
		name     string
		edit     func(*appsv1.DaemonSet)
		restored func(*appsv1.DaemonSet) bool
	}{
		{
			name:     "the metrics port",
			edit:     func(ds *appsv1.DaemonSet) { container(ds).Ports[0].ContainerPort = 9999 },
			restored: func(ds *appsv1.DaemonSet) bool { return cmp.Equal(container(ds).Ports, container(orig).Ports) },
		},
		{
			name:     "the image",
			edit:     func(ds *appsv1.DaemonSet) { container(ds).Image = "evil:latest" },
			restored: func(ds *appsv1.DaemonSet) bool { return container(ds).Image == container(orig).Image },
		},
		{
			name: "an argument changed and one added",
			edit: func(ds *appsv1.DaemonSet) {
				container(ds).Command[1] = "idle"
				container(ds).Args = []string{"--v=9"}
			},
			restored: func(ds *appsv1.DaemonSet) bool {
				return cmp.Equal(container(ds).Command, container(orig).Command) && cmp.Equal(container(ds).Args, container(orig).Args)
			},
		},
		{
			name: "a pod label the controller sets; others' label and annotation added",
			edit: func(ds *appsv1.DaemonSet) {
				ds.Spec.Template.Labels["app.kubernetes.io/managed-by"] = "someone"
				ds.Spec.Template.Labels["team"] = "infra"
				ds.Labels["team"] = "infra"
				ds.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}
			},
			restored: func(ds *appsv1.DaemonSet) bool {
				return ds.Spec.Template.Labels["app.kubernetes.io/managed-by"] == "cdplane"
			},
		},
		{
			name: "the update strategy",
			edit: func(ds *appsv1.DaemonSet) {
				ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("100%"))}}
			},
			restored: func(ds *appsv1.DaemonSet) bool {
				return equality.Semantic.DeepEqual(ds.Spec.UpdateStrategy, orig.Spec.UpdateStrategy)
			},
		},
		{
			name: "privileged, with a host path",
			edit: privileged,
			restored: func(ds *appsv1.DaemonSet) bool {
				return len(ds.Spec.Template.Spec.Volumes) == 0 && container(ds).SecurityContext == nil
			},
		},
	}
	for _, tc := range edits {
		editObject(e, keys.ds, &appsv1.DaemonSet{}, tc.edit)
		e.eventually(2*time.Minute, "the DaemonSet restored after a hand edit of "+tc.name, func() (bool, error) {
			got := &appsv1.DaemonSet{}
			err := e.c.Get(context.Background(), keys.ds, got)
			return err == nil && tc.restored(got), err
		})
	}
	got := &appsv1.DaemonSet{}
	if err := e.c.Get(e.ctx(), keys.ds, got); err != nil {
		t.Fatal(err)
	}
	if got.UID != orig.UID {
		t.Errorf("the DaemonSet was replaced: UID %s -> %s", orig.UID, got.UID)
	}
	if diff := cmp.Diff(orig.Spec.Template.Spec, got.Spec.Template.Spec); diff != "" {
		t.Errorf("pod template after the restores (-created +now):\n%s", diff)
	}
	if orig.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		t.Errorf("update strategy %s, want the default OnDelete", orig.Spec.UpdateStrategy.Type)
	}
	if got.Labels["team"] != "infra" || got.Spec.Template.Labels["team"] != "infra" ||
		got.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "" {
		t.Errorf("labels %v, pod labels %v, pod annotations %v: others' label and annotation must stay",
			got.Labels, got.Spec.Template.Labels, got.Spec.Template.Annotations)
	}
}

// privileged makes the daemon privileged with the host's root mounted: what the controller must
// never leave running.
func privileged(ds *appsv1.DaemonSet) {
	p := &ds.Spec.Template.Spec
	p.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	p.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "root", MountPath: "/host"}}
	p.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
}

// TestDriftUpgradeMovesDaemonSet: the controller restarted with another daemon image, log
// verbosity, update strategy and daemon metrics port (an upgrade of cdplane, a changed chart
// value) moves a live domain's DaemonSet to them in one write; the claim templates, which do not
// depend on them, are not written.
func TestDriftUpgradeMovesDaemonSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("upgrade", 0)
	keys := e.objectsOf(cd)
	orig, daemonRCT, workloadRCT := e.waitCreated(cd)

	e.stopMgr()
	e.opts = append(e.opts, func(o *controller.Options) {
		o.DaemonImage, o.DaemonLogVerbosity = "cdplane:v2", 3
		o.DaemonUpdateStrategy = appsv1.RollingUpdateDaemonSetStrategyType
		o.DaemonMetricsPort = 8082
	})
	e.startManager(true)

	got := &appsv1.DaemonSet{}
	e.eventually(2*time.Minute, "the DaemonSet's template on the new image", func() (bool, error) {
		err := e.c.Get(context.Background(), keys.ds, got)
		return err == nil && got.Spec.Template.Spec.Containers[0].Image == "cdplane:v2", err
	})
	if got.UID != orig.UID {
		t.Errorf("the DaemonSet was replaced: UID %s -> %s", orig.UID, got.UID)
	}
	if got.Generation != orig.Generation+1 {
		t.Errorf("generation %d -> %d, want one update", orig.Generation, got.Generation)
	}
	wantStrategy := appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{
		MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromInt32(0)),
	}}
	if diff := cmp.Diff(wantStrategy, got.Spec.UpdateStrategy); diff != "" {
		t.Errorf("update strategy (-want +got):\n%s", diff)
	}
	verbosity := ""
	for _, v := range got.Spec.Template.Spec.Containers[0].Env {
		if v.Name == "LOG_VERBOSITY" {
			verbosity = v.Value
		}
	}
	if verbosity != "3" {
		t.Errorf("LOG_VERBOSITY %q, want 3", verbosity)
	}
	c := got.Spec.Template.Spec.Containers[0]
	if diff := cmp.Diff([]string{"--metrics-bind-address=$(POD_IP):8082"}, c.Args); diff != "" {
		t.Errorf("daemon arguments (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.ContainerPort{{Name: "metrics", ContainerPort: 8082, Protocol: corev1.ProtocolTCP}}, c.Ports); diff != "" {
		t.Errorf("daemon ports (-want +got):\n%s", diff)
	}
	if got.Annotations[computedomain.DesiredHashAnnotation] == orig.Annotations[computedomain.DesiredHashAnnotation] {
		t.Errorf("hash unchanged (%s) although the rendering changed", got.Annotations[computedomain.DesiredHashAnnotation])
	}
	for key, before := range map[client.ObjectKey]*resourcev1.ResourceClaimTemplate{keys.daemonTemplate: daemonRCT, keys.workloadTemplate: workloadRCT} {
		after := &resourcev1.ResourceClaimTemplate{}
		if err := e.c.Get(e.ctx(), key, after); err != nil {
			t.Fatal(err)
		}
		if after.UID != before.UID || after.ResourceVersion != before.ResourceVersion {
			t.Errorf("claim template %s written by the upgrade: %s/%s -> %s/%s", key, before.UID, before.ResourceVersion, after.UID, after.ResourceVersion)
		}
	}
}

// TestDriftClaimTemplatesOfAnOlderVersion: templates as an older controller left them, found
// after a restart. The workload template's spec differs (claims without the managed-by label,
// no plane selector): it is deleted and created again, since the spec is immutable. The daemon
// template's spec is the same but it has no hash (as an older controller left it): only its
// metadata is updated, in place.
func TestDriftClaimTemplatesOfAnOlderVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cd := e.createCD("older", 0)
	keys := e.objectsOf(cd)
	_, daemonRCT, workloadRCT := e.waitCreated(cd)
	e.stopMgr()

	replace := func(rct *resourcev1.ResourceClaimTemplate, change func(*resourcev1.ResourceClaimTemplate)) *resourcev1.ResourceClaimTemplate {
		t.Helper()
		if err := e.c.Delete(e.ctx(), rct); err != nil {
			t.Fatal(err)
		}
		old := &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: rct.Name, Namespace: rct.Namespace, Labels: rct.Labels, OwnerReferences: rct.OwnerReferences},
			Spec:       *rct.Spec.DeepCopy(),
		}
		change(old)
		e.eventually(2*time.Minute, "the older template created in place of "+rct.Name, func() (bool, error) {
			err := e.c.Create(context.Background(), old)
			return err == nil, client.IgnoreAlreadyExists(err)
		})
		return old
	}
	oldWorkload := replace(workloadRCT, func(rct *resourcev1.ResourceClaimTemplate) {
		delete(rct.Spec.Labels, "app.kubernetes.io/managed-by")
		rct.Spec.Spec.Devices.Requests[0].Exactly.Selectors = nil
	})
	oldDaemon := replace(daemonRCT, func(*resourcev1.ResourceClaimTemplate) {})

	e.startManager(true)
	e.eventually(2*time.Minute, "the workload template recreated with the desired spec", func() (bool, error) {
		got := &resourcev1.ResourceClaimTemplate{}
		if err := e.c.Get(context.Background(), keys.workloadTemplate, got); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return got.UID != oldWorkload.UID && equality.Semantic.DeepEqual(got.Spec, workloadRCT.Spec), nil
	})
	e.eventually(2*time.Minute, "the daemon template's hash added in place", func() (bool, error) {
		got := &resourcev1.ResourceClaimTemplate{}
		if err := e.c.Get(context.Background(), keys.daemonTemplate, got); err != nil {
			return false, err
		}
		if got.UID != oldDaemon.UID {
			return false, fmt.Errorf("the daemon template was recreated (UID %s -> %s): only its metadata differed", oldDaemon.UID, got.UID)
		}
		return got.Annotations[computedomain.DesiredHashAnnotation] == daemonRCT.Annotations[computedomain.DesiredHashAnnotation], nil
	})
}

// TestDriftLeavesOtherOwnersAlone: objects of the domain's names that were not created for it
// (a DaemonSet labelled for the domain but managed by someone else, an unlabelled daemon claim
// template) are neither updated nor replaced, however they differ from what the controller would
// render; the clash is reported as before.
func TestDriftLeavesOtherOwnersAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	// Created outside the manager's selection, so that the foreign objects, named after its
	// UID, are there before the controller first sees the domain.
	cd := testutil.MakeComputeDomain("foreign").Namespace(e.ns).Label("cdplane.test/env", e.selector+"-later").Obj()
	if err := e.c.Create(e.ctx(), cd); err != nil {
		t.Fatal(err)
	}
	keys := e.objectsOf(cd)
	uid := string(cd.UID)
	ds := testutil.MakeDaemonSet(keys.ds.Name, keys.ds.Namespace).Selector(cdv1beta1.ComputeDomainLabel, uid).
		Label(cdv1beta1.ComputeDomainLabel, uid).Label("app.kubernetes.io/managed-by", "someone-else").
		PodLabel(cdv1beta1.ComputeDomainLabel, uid).Obj()
	privileged(ds)
	rct := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: keys.daemonTemplate.Name, Namespace: keys.daemonTemplate.Namespace, Labels: map[string]string{"team": "other"}},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}},
		}}},
	}
	for _, o := range []client.Object{ds, rct} {
		if err := e.c.Create(e.ctx(), o); err != nil {
			t.Fatal(err)
		}
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"cdplane.test/env":"`+e.selector+`"}}}`))
	if err := e.c.Patch(e.ctx(), cd, patch); err != nil {
		t.Fatal(err)
	}

	e.eventually(2*time.Minute, "both clashes reported", func() (bool, error) {
		for _, c := range e.getCD(cd).Status.Conditions {
			if c.Type == cdv1beta1.ConditionResourcesCreated && c.Status == metav1.ConditionFalse && c.Reason == cdv1beta1.ReasonNameClash {
				return strings.Contains(c.Message, "DaemonSet "+keys.ds.String()) && strings.Contains(c.Message, "ResourceClaimTemplate "+keys.daemonTemplate.String()), nil
			}
		}
		return false, nil
	})
	for _, before := range []client.Object{ds, rct} {
		after := before.DeepCopyObject().(client.Object)
		if err := e.c.Get(e.ctx(), client.ObjectKeyFromObject(before), after); err != nil {
			t.Fatalf("%T %s: %v", before, client.ObjectKeyFromObject(before), err)
		}
		if after.GetUID() != before.GetUID() || after.GetResourceVersion() != before.GetResourceVersion() {
			t.Errorf("%T %s was written: %s/%s -> %s/%s", before, client.ObjectKeyFromObject(before),
				before.GetUID(), before.GetResourceVersion(), after.GetUID(), after.GetResourceVersion())
		}
	}
}
