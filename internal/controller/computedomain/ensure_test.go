package computedomain

import (
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

// TestNameClashIsNeverWritten: an object in the place of one the domain needs (its claim
// templates, its DaemonSet) that was not created by this plane's controller for this domain is
// never written: not updated, patched, applied or deleted, whoever it belongs to; the clash is
// reported on the domain (ResourcesCreated False, NameClash, naming the object). The control,
// the domain's own DaemonSet, is brought back to what the controller renders.
func TestNameClashIsNeverWritten(t *testing.T) {
	dsName := cdv1beta1.DaemonSetName(testUID)
	anotherDomain := map[string]string{cdv1beta1.ComputeDomainLabel: "other-uid", managedBy: "cdplane", cdv1beta1.ControlPlaneLabel: "plane-a"}
	cases := map[string]struct {
		existing client.Object
		kind     string
		// clash is what the ResourcesCreated condition must name; empty: no clash (the control).
		clash string
	}{
		"a user's DaemonSet": {
			existing: testutil.MakeDaemonSet(dsName, testDriverNS).Obj(), kind: "DaemonSet",
			clash: "DaemonSet " + testDriverNS + "/" + dsName + " exists and was not created for this ComputeDomain",
		},
		"another plane's DaemonSet for the domain": {
			existing: withLabels(testutil.MakeDaemonSet(dsName, testDriverNS).Obj(), ownedBy("plane-b")), kind: "DaemonSet",
			clash: "DaemonSet " + testDriverNS + "/" + dsName + " exists",
		},
		"the legacy plane's DaemonSet for the domain": {
			existing: withLabels(testutil.MakeDaemonSet(dsName, testDriverNS).Obj(), ownedBy("")), kind: "DaemonSet",
			clash: "DaemonSet " + testDriverNS + "/" + dsName + " exists",
		},
		"another domain's claim template of the workload's name": {
			existing: withLabels(&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: userNS, Name: "cd-channel"}}, anotherDomain),
			kind:     "ResourceClaimTemplate",
			clash:    "ResourceClaimTemplate " + userNS + "/cd-channel exists and was not created for this ComputeDomain",
		},
		"control: the domain's own DaemonSet": {
			existing: withLabels(testutil.MakeDaemonSet(dsName, testDriverNS).Obj(), ownedBy("plane-a")), kind: "DaemonSet",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cd := unitDomain("plane-a", true)
			c, writes := recordingClient(cd, userNamespace("plane-a"), tc.existing)
			r := New(c, c, Options{DriverNamespace: testDriverNS, DaemonImage: "img", ControlPlaneID: "plane-a"})
			pass(t, r)

			var touched []apiWrite
			for _, w := range writes.of(tc.kind) {
				if w.Namespace == tc.existing.GetNamespace() && w.Name == tc.existing.GetName() {
					touched = append(touched, w)
				}
			}
			got := &cdv1beta1.ComputeDomain{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(cd), got); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, cdv1beta1.ConditionResourcesCreated)
			if cond == nil {
				t.Fatalf("no %s condition in %+v", cdv1beta1.ConditionResourcesCreated, got.Status)
			}
			if tc.clash == "" {
				if len(touched) == 0 {
					t.Errorf("the domain's own %s was not brought back to what the controller renders", tc.kind)
				}
				if cond.Status != metav1.ConditionTrue {
					t.Errorf("condition %+v, want True", cond)
				}
				return
			}
			if len(touched) > 0 {
				t.Errorf("writes to the %s that was not created for the domain: %v", tc.kind, touched)
			}
			if cond.Status != metav1.ConditionFalse || cond.Reason != cdv1beta1.ReasonNameClash || !strings.Contains(cond.Message, tc.clash) {
				t.Errorf("condition %s=%s (%s): %q; want False, %s, naming %q", cond.Type, cond.Status, cond.Reason, cond.Message, cdv1beta1.ReasonNameClash, tc.clash)
			}
		})
	}
}

// withLabels returns obj with labels l.
func withLabels[T client.Object](obj T, l map[string]string) T {
	obj.SetLabels(l)
	return obj
}
