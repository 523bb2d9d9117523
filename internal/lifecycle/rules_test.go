package lifecycle

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	charts "cdplane/deployments/helm"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

func ns(labels map[string]string, deleting bool) metav1.Object {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	if deleting {
		now := metav1.Now()
		n.DeletionTimestamp = &now
	}
	return n
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("error %v, want none", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

func TestCheckNamespace(t *testing.T) {
	plane := func(v string) map[string]string { return map[string]string{cdv1beta1.ControlPlaneLabel: v} }
	ours := map[string]string{partOfLabel: partOfValue}
	for name, tc := range map[string]struct {
		id   string
		ns   metav1.Object
		want string
	}{
		"absent":                            {id: "plane-a"},
		"labelled for the plane":            {id: "plane-a", ns: ns(plane("plane-a"), false)},
		"labelled for another plane":        {id: "plane-a", ns: ns(plane("plane-b"), false), want: `labelled resource.nvidia.com/control-plane-id=plane-b for control plane "plane-b", not control plane "plane-a"`},
		"an empty label":                    {id: "plane-a", ns: ns(plane(""), false), want: "for an empty control-plane id"},
		"unlabelled":                        {id: "plane-a", ns: ns(nil, false), want: "exists without the label resource.nvidia.com/control-plane-id=plane-a"},
		"being deleted":                     {id: "plane-a", ns: ns(plane("plane-a"), true), want: "is being deleted"},
		"legacy: absent":                    {},
		"legacy: created by cdplane":        {ns: ns(ours, false)},
		"legacy: not created by cdplane":    {ns: ns(nil, false), want: "was not created for the legacy control plane"},
		"legacy: labelled for a plane":      {ns: ns(plane("plane-a"), false), want: "not the legacy control plane"},
		"legacy: ours but labelled a plane": {ns: ns(map[string]string{partOfLabel: partOfValue, cdv1beta1.ControlPlaneLabel: "x"}, false), want: `for control plane "x"`},
	} {
		t.Run(name, func(t *testing.T) {
			checkErr(t, CheckNamespace(tc.id, "n", tc.ns), tc.want)
		})
	}
}

func TestCheckClusterScoped(t *testing.T) {
	obj := func(release, namespace string) metav1.Object {
		o := &metav1.ObjectMeta{Name: "plane-a-cdplane-controller"}
		if release != "" {
			o.Annotations = map[string]string{releaseNameAnnotation: release, releaseNamespaceAnnotation: namespace}
		}
		return o
	}
	for name, tc := range map[string]struct {
		existing metav1.Object
		want     string
	}{
		"absent":               {},
		"owned by the release": {existing: obj("plane-a-cdplane", "plane-a-cdplane")},
		"created by hand":      {existing: obj("", ""), want: "ClusterRole plane-a-cdplane-controller exists and is not managed by Helm"},
		"another release":      {existing: obj("other", "plane-a-cdplane"), want: "owned by Helm release plane-a-cdplane/other"},
		"same name, other ns":  {existing: obj("plane-a-cdplane", "elsewhere"), want: "owned by Helm release elsewhere/plane-a-cdplane"},
	} {
		t.Run(name, func(t *testing.T) {
			checkErr(t, CheckClusterScoped("plane-a-cdplane", "plane-a-cdplane", "ClusterRole", tc.existing), tc.want)
		})
	}
}

func TestCheckCanonical(t *testing.T) {
	render := func(id string) []charts.Manifest {
		ms, err := charts.Render(charts.Plane, "r", plane.Name(id, plane.DriverNamespaceLegacyName), testutil.WithImage(map[string]any{"controlPlaneID": id}))
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	legacy := render("")
	checkErr(t, CheckCanonical("plane-a", render("plane-a"), legacy), "")
	checkErr(t, CheckCanonical("", legacy, legacy), "")
	// A cluster-scoped name that is only prefixed with the id is not canonical.
	bad := render("plane-a")
	for _, m := range bad {
		if m.Object.GetKind() == "ClusterRole" {
			m.Object.SetName("plane-a-x-" + m.Object.GetName())
			break
		}
	}
	checkErr(t, CheckCanonical("plane-a", bad, legacy), "not named canonically")
}

func TestDomainsBlockingDestroy(t *testing.T) {
	checkErr(t, DomainsBlockingDestroy("plane-a", nil), "")
	cds := make([]cdv1beta1.ComputeDomain, 12)
	for i := range cds {
		cds[i].Namespace, cds[i].Name = "ns", string(rune('a'+i))
	}
	checkErr(t, DomainsBlockingDestroy("plane-a", cds[:1]), `control plane "plane-a" still has 1 ComputeDomains: ns/a; delete them first, or pass --delete-domains`)
	checkErr(t, DomainsBlockingDestroy("", cds), "the legacy control plane still has 12 ComputeDomains: ns/a, ns/b, ns/c, ns/d, ns/e, ns/f, ns/g, ns/h, ns/i, ns/j and 2 more")
}
