package planes

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
	"cdplane/internal/testutil/prereqs"
)

var devicePoliciesOnce sync.Once

// installDevicePolicies creates the prerequisites' device-claim and ResourceSlice policies once.
func installDevicePolicies(t *testing.T) {
	t.Helper()
	var err error
	devicePoliciesOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = prereqs.Create(ctx, testCluster.Client, "device-claims-policy.yaml", "resourceslice-policy.yaml", "node-domain-label-policy.yaml")
	})
	if err != nil {
		t.Fatal(err)
	}
}

// claimEditorRole lets a tenant create ResourceClaims and templates (the built-in edit role
// covers them through aggregation, which needs kube-controller-manager, not running here).
var claimEditorRole = &rbacv1.ClusterRole{
	ObjectMeta: metav1.ObjectMeta{Name: "planes-test-claim-editor"},
	Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"resource.k8s.io"},
		Resources: []string{"resourceclaims", "resourceclaimtemplates"},
		Verbs:     []string{"create", "get", "list", "delete"},
	}},
}

// sliceWriterRole lets its holder write ResourceSlices, so that only admission stands in the way.
var sliceWriterRole = &rbacv1.ClusterRole{
	ObjectMeta: metav1.ObjectMeta{Name: "planes-test-slice-writer"},
	Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"resource.k8s.io"},
		Resources: []string{"resourceslices"},
		Verbs:     []string{"create", "update", "delete", "get"},
	}},
}

func deviceClaim(ns, name string, devices resourcev1.DeviceClaim) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: resourcev1.ResourceClaimSpec{Devices: devices}}
}

func claimTemplate(ns, name string, devices resourcev1.DeviceClaim) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: devices}}}
}

// exactly is one request for class with the given CEL selectors.
func exactly(class string, selectors ...string) resourcev1.DeviceClaim {
	req := &resourcev1.ExactDeviceRequest{DeviceClassName: class}
	for _, s := range selectors {
		req.Selectors = append(req.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
	return resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "r", Exactly: req}}}
}

func planeSelector(id string) string {
	return `device.attributes["compute-domain.nvidia.com"].controlPlane == "` + id + `"`
}

var dryRun = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

// TestTenantCannotClaimDaemonOrChannelDevices: a tenant allowed by RBAC to create claims and
// claim templates cannot ask for compute-domain.nvidia.com's devices in any form (its device
// classes, a request alternative, a selector naming the driver, an opaque config for it):
// claimed on every node, daemon-0 or channel-0 would stop every ComputeDomain of the cluster.
// Claims for them come only from kube-controller-manager, generated from the templates a
// plane's controller writes; other drivers' claims are not affected.
func TestTenantCannotClaimDaemonOrChannelDevices(t *testing.T) {
	t.Parallel()
	installDevicePolicies(t)
	ctx := testContext(t)
	ns := assignedNamespace(t, planeA)
	tenantUser := tenant(t, ns)
	if err := tenantUser.bindInNamespace(ctx, ns, claimEditorRole.Name, claimEditorRole); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(tenantUser.cfg)
	if err != nil {
		t.Fatal(err)
	}
	viaAlternative := resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "r", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "gpu", DeviceClassName: "gpu.example.com"}, {Name: "daemon", DeviceClassName: cdv1beta1.DaemonDeviceClass},
	}}}}
	withConfig := exactly("gpu.example.com")
	withConfig.Config = []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
		Driver: cdv1beta1.DriverName, Parameters: rawJSON(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"x"}`),
	}}}}
	attacks := map[string]resourcev1.DeviceClaim{
		"the channel class":              exactly(cdv1beta1.ChannelDeviceClass),
		"the daemon class":               exactly(cdv1beta1.DaemonDeviceClass, planeSelector(planeA)),
		"a request alternative":          viaAlternative,
		"a selector naming the driver":   exactly("gpu.example.com", `device.driver == "compute-domain.nvidia.com"`),
		"an opaque config of the driver": withConfig,
	}
	eventuallyRefused(t, "a tenant's channel claim", func() error {
		_, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, deviceClaim(ns, "probe", exactly(cdv1beta1.ChannelDeviceClass)), dryRun)
		return err
	})
	for what, devices := range attacks {
		_, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, deviceClaim(ns, "attack", devices), dryRun)
		if !isAdmissionRefusal(err) || !strings.Contains(err.Error(), "generated from a ComputeDomain's claim template") {
			t.Errorf("tenant claim with %s: %v, want the device-claims policy's refusal", what, err)
		}
		_, err = cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, claimTemplate(ns, "attack", devices), dryRun)
		if !isAdmissionRefusal(err) || !strings.Contains(err.Error(), "only a control plane's controller writes those") {
			t.Errorf("tenant claim template with %s: %v, want the device-claims policy's refusal", what, err)
		}
	}
	// Not ours: admitted.
	if _, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, deviceClaim(ns, "gpu", exactly("gpu.example.com")), dryRun); err != nil {
		t.Errorf("tenant claim of another driver: %v, want admitted", err)
	}
	if _, err := cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, claimTemplate(ns, "gpu", exactly("gpu.example.com")), dryRun); err != nil {
		t.Errorf("tenant claim template of another driver: %v, want admitted", err)
	}

	// kube-controller-manager generates the claims from templates: admitted.
	kcm, err := newIdentity(ctx, "system:kube-controller-manager", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := kcm.bindInNamespace(ctx, ns, claimEditorRole.Name, claimEditorRole); err != nil {
		t.Fatal(err)
	}
	kcs, err := kubernetes.NewForConfig(kcm.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kcs.ResourceV1().ResourceClaims(ns).Create(ctx, deviceClaim(ns, "generated", exactly(cdv1beta1.ChannelDeviceClass, planeSelector(planeA))), dryRun); err != nil {
		t.Errorf("kube-controller-manager generating a channel claim: %v, want admitted", err)
	}
}

// TestControllerWritesOnlyItsOwnClaimTemplates: a plane's controller (a leaked token) writes
// daemon claim templates only in its driver namespace and channel templates only in namespaces
// assigned to it, each request selecting only its own plane's devices; the legacy plane's
// controller, bound cluster-wide, writes none in a named plane's namespace. Two policies say
// so, with the same words: the plane's own controller-scope policy and the shared
// device-claims policy (which also holds look-alike accounts of planes not installed).
func TestControllerWritesOnlyItsOwnClaimTemplates(t *testing.T) {
	t.Parallel()
	installDevicePolicies(t)
	ctx := testContext(t)
	const id = "tmpl"
	driverNS := installPlaneRights(t, id, "rbac-controller.yaml", "policy-controller.yaml")
	assigned := assignedNamespace(t, id)
	other := assignedNamespace(t, planeB)
	controller := podBoundClient(t, driverNS, plane.Name(id, "cdplane-controller"), nil).ResourceV1()

	create := func(ns string, devices resourcev1.DeviceClaim) error {
		_, err := controller.ResourceClaimTemplates(ns).Create(ctx, claimTemplate(ns, "t", devices), dryRun)
		return err
	}
	eventuallyRefused(t, "the controller's daemon template in a tenant namespace", func() error {
		return create(assigned, exactly(cdv1beta1.DaemonDeviceClass, planeSelector(id)))
	})
	for what, tc := range map[string]struct {
		ns      string
		devices resourcev1.DeviceClaim
		want    string // "" admitted
	}{
		"channel in an assigned namespace":     {ns: assigned, devices: exactly(cdv1beta1.ChannelDeviceClass, planeSelector(id))},
		"daemon in the driver namespace":       {ns: driverNS, devices: exactly(cdv1beta1.DaemonDeviceClass, planeSelector(id))},
		"channel without the plane's selector": {ns: assigned, devices: exactly(cdv1beta1.ChannelDeviceClass), want: "each request selecting"},
		"channel selecting another plane":      {ns: assigned, devices: exactly(cdv1beta1.ChannelDeviceClass, planeSelector(planeB)), want: "each request selecting"},
		"daemon in a tenant namespace":         {ns: assigned, devices: exactly(cdv1beta1.DaemonDeviceClass, planeSelector(id)), want: "daemon devices in its driver namespace"},
		"channel in the driver namespace":      {ns: driverNS, devices: exactly(cdv1beta1.ChannelDeviceClass, planeSelector(id)), want: "channels in its tenants' namespaces"},
		"channel in another plane's namespace": {ns: other, devices: exactly(cdv1beta1.ChannelDeviceClass, planeSelector(id)), want: "cannot create resource"},
	} {
		err := create(tc.ns, tc.devices)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want admitted", what, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a refusal containing %q", what, err, tc.want)
		}
	}
}

// TestLookAlikeControllerCannotSquatDaemonDevices: anyone who can create a namespace can name
// it "<x>-cdplane" and give it a service account "<x>-cdplane-controller" for a plane x that is
// not installed, so no plane policy of x holds it. Were the account's name enough, it would
// template every node's daemon device, in every plane, for pause pods, and no ComputeDomain
// could start anywhere. Its templates are refused: its namespace carries no plane label (only
// administrators set one), and whatever namespace it writes in, its requests may select only
// plane x's devices, which no node publishes. The same holds for a look-alike of the legacy
// plane's account when the legacy plane is not installed.
func TestLookAlikeControllerCannotSquatDaemonDevices(t *testing.T) {
	t.Parallel()
	installDevicePolicies(t)
	ctx := testContext(t)
	for _, id := range []string{"ghost", ""} {
		ns := plane.Name(id, plane.DriverNamespaceLegacyName)
		u, err := serviceAccountIdentity(ctx, ns, plane.Name(id, "cdplane-controller"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.bindInNamespace(ctx, ns, claimEditorRole.Name, claimEditorRole); err != nil {
			t.Fatal(err)
		}
		templates := kubernetes.NewForConfigOrDie(u.cfg).ResourceV1().ResourceClaimTemplates(ns)
		create := func(devices resourcev1.DeviceClaim) error {
			_, err := templates.Create(ctx, claimTemplate(ns, "squat", devices), dryRun)
			return err
		}
		eventuallyRefused(t, "a look-alike controller's daemon template", func() error {
			return create(exactly(cdv1beta1.DaemonDeviceClass, planeSelector(planeA)))
		})
		for what, tc := range map[string]struct {
			devices resourcev1.DeviceClaim
			want    string
		}{
			"another plane's daemon devices": {devices: exactly(cdv1beta1.DaemonDeviceClass, planeSelector(planeA)), want: "selecting " + planeSelector(id)},
			"every plane's daemon devices":   {devices: exactly(cdv1beta1.DaemonDeviceClass), want: "selecting " + planeSelector(id)},
			"its own plane's daemon devices": {devices: exactly(cdv1beta1.DaemonDeviceClass, planeSelector(id))},
		} {
			err := create(tc.devices)
			if id == "ghost" {
				// Refused whatever it selects: its namespace is no plane's.
				tc.want = "only in namespaces of its plane"
			}
			checkAdmission(t, fmt.Sprintf("look-alike %q, %s", id, what), err, tc.want)
		}
	}
}

// rawJSON is an opaque parameter value.
func rawJSON(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

// TestNodeCannotPublishAnotherPlanesDevices: a compromised node of plane a cannot draw plane
// b's workloads onto itself: its plugin's token publishes only devices labelled for plane a, of
// its own node; the node's own identity (system:node:*) and any other account cannot publish
// this driver's devices at all, even with RBAC; an account merely named like a plugin outside
// a driver namespace is no plugin. Other drivers' slices are not affected.
func TestNodeCannotPublishAnotherPlanesDevices(t *testing.T) {
	t.Parallel()
	installDevicePolicies(t)
	ctx := testContext(t)
	const id = "slices"
	driverNS := installPlaneRights(t, id, "rbac-kubelet-plugin.yaml")
	node := newNode(t, map[string]string{cdv1beta1.ControlPlaneLabel: id})
	pluginSA := plane.Name(id, "cdplane-kubelet-plugin")
	pod := testutil.MakePod("plugin-"+node, driverNS).ServiceAccount(pluginSA).NodeName(node).Obj()
	if err := testCluster.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	plugin := podBoundClient(t, driverNS, pluginSA, pod).ResourceV1().ResourceSlices()
	slice := func(driver string, planes ...string) *resourcev1.ResourceSlice {
		s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "attack-"},
			Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: &node, Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}}}
		for i, p := range planes {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "channel-" + string(rune('0'+i)),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"controlPlane": {StringValue: ptr(p)}}})
		}
		return s
	}
	eventuallyRefused(t, "a plugin publishing another plane's devices", func() error {
		_, err := plugin.Create(ctx, slice(cdv1beta1.DriverName, "b"), dryRun)
		return err
	})
	if _, err := plugin.Create(ctx, slice(cdv1beta1.DriverName, id, id), dryRun); err != nil {
		t.Errorf("the plugin publishing its own plane's devices: %v, want admitted", err)
	}
	if _, err := plugin.Create(ctx, slice(cdv1beta1.DriverName, id, ""), dryRun); err == nil || !strings.Contains(err.Error(), "whose controlPlane attribute is its own") {
		t.Errorf("the plugin publishing one legacy device among its own: %v, want refused", err)
	}
	// The attribute's second spelling: the scheduler sees "controlPlane" and
	// "compute-domain.nvidia.com/controlPlane" as one attribute holding either value, so a
	// device carrying its own plane under one and plane b under the other would match b's
	// selectors about as often as not.
	const qualified = resourcev1.QualifiedName(cdv1beta1.DriverName + "/controlPlane")
	spelled := func(attrs map[resourcev1.QualifiedName]resourcev1.DeviceAttribute) *resourcev1.ResourceSlice {
		s := slice(cdv1beta1.DriverName, id)
		s.Spec.Devices[0].Attributes = attrs
		return s
	}
	for what, tc := range map[string]struct {
		attrs map[resourcev1.QualifiedName]resourcev1.DeviceAttribute
		want  string // "" admitted
	}{
		"own plane, qualified spelling only": {attrs: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{qualified: {StringValue: ptr(id)}}},
		"own plane under both spellings":     {attrs: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"controlPlane": {StringValue: ptr(id)}, qualified: {StringValue: ptr(id)}}},
		"own plane bare, plane b qualified": {attrs: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"controlPlane": {StringValue: ptr(id)}, qualified: {StringValue: ptr("b")}},
			want: string(qualified) + `="b"`},
		"plane b bare, own plane qualified": {attrs: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"controlPlane": {StringValue: ptr("b")}, qualified: {StringValue: ptr(id)}},
			want: `controlPlane="b"`},
		"plane b qualified only":     {attrs: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{qualified: {StringValue: ptr("b")}}, want: "under every spelling present"},
		"not a string":               {attrs: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"controlPlane": {IntValue: ptr(int64(1))}}, want: "<not a string>"},
		"no controlPlane attribute":  {attrs: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"other": {StringValue: ptr(id)}}, want: "no controlPlane attribute"},
		"another domain's attribute": {attrs: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"controlPlane": {StringValue: ptr(id)}, "example.com/controlPlane": {StringValue: ptr("b")}}},
	} {
		_, err := plugin.Create(ctx, spelled(tc.attrs), dryRun)
		checkAdmission(t, what, err, tc.want)
	}

	kubelet, err := newIdentity(ctx, "system:node:"+node, []string{"system:nodes"})
	if err != nil {
		t.Fatal(err)
	}
	impostor, err := serviceAccountIdentity(ctx, testCluster.Namespace(t, nil), pluginSA, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []*identity{kubelet, impostor} {
		if err := u.bindClusterRole(ctx, sliceWriterRole); err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(u.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, slice(cdv1beta1.DriverName, id), dryRun); !isAdmissionRefusal(err) ||
			!strings.Contains(err.Error(), "may be written only by a cdplane kubelet plugin") {
			t.Errorf("%s publishing compute-domain.nvidia.com devices: %v, want refused", u, err)
		}
		if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, slice("gpu.example.com"), dryRun); err != nil {
			t.Errorf("%s publishing another driver's slice: %v, want admitted", u, err)
		}
	}
}

// TestNodeIdentityCannotLabelItselfIntoADomain: NodeRestriction lets a kubelet change any label
// of its Node outside kubernetes.io; a compromised node's kubelet credentials still cannot set,
// change or remove the domain label (which would schedule that domain's daemon, and its token,
// onto the node). Other label changes by the node are not affected.
func TestNodeIdentityCannotLabelItselfIntoADomain(t *testing.T) {
	t.Parallel()
	installDevicePolicies(t)
	ctx := testContext(t)
	node := newNode(t, map[string]string{cdv1beta1.ComputeDomainLabel: "uid-old"})
	kubelet, err := newIdentity(ctx, "system:node:"+node, []string{"system:nodes"})
	if err != nil {
		t.Fatal(err)
	}
	if err := kubelet.bindClusterRole(ctx, labelEditorRole); err != nil {
		t.Fatal(err)
	}
	nodes := kubernetes.NewForConfigOrDie(kubelet.cfg).CoreV1().Nodes()
	patch := func(labels string) error {
		_, err := nodes.Patch(ctx, node, types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	eventuallyRefused(t, "a node labelling itself into a domain", func() error {
		return patch(`{"resource.nvidia.com/computeDomain":"uid-victim"}`)
	})
	if err := patch(`{"resource.nvidia.com/computeDomain":null}`); !isAdmissionRefusal(err) || !strings.Contains(err.Error(), "node's own identity may not") {
		t.Errorf("a node removing its domain label: %v, want refused", err)
	}
	if err := patch(`{"example.com/rack":"r1"}`); err != nil {
		t.Errorf("a node changing an unrelated label: %v, want admitted", err)
	}
}
