package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	cdapply "cdplane/api/v1beta1/applyconfiguration/api/v1beta1"
	"cdplane/internal/controller/computedomain"
	"cdplane/internal/lifecycle"
	"cdplane/internal/testutil"
)

// controllerManager is the controller's field manager (computedomain.Options' default).
const controllerManager = "cdplane-controller"

// TestMembershipListsConvertWithEveryEntry: status.nodes and a clique's daemons are map-typed
// lists in NVIDIA's CRDs and in cdplane before 0.2.0, atomic lists since. Taking over CRDs that
// declare the map type (as NVIDIA's chart leaves them, outside Helm) converts them; every
// entry of the existing objects is still there, written by server-side apply per entry and by
// a whole-object update (as NVIDIA's daemons write); the controller's next apply replaces the
// lists whole, whoever wrote their entries, without a conflict, and leaves no per-entry
// managed fields.
//
// The other way is not tested because it is not supported (docs/upgrading.md): after the
// CRDs go back to the map type, the entries are owned by no one under it, so a controller's
// next apply that leaves a node out would not remove it. Going back to 0.1.0 keeps 0.2.0's
// prerequisites; a 0.1.0 controller writes the atomic lists whole like this one.
func TestMembershipListsConvertWithEveryEntry(t *testing.T) {
	ctx := context.Background()
	m, _ := lifecycleTest(t, "")
	c := testCluster.Client

	// The CRDs as they were: this release's, with the two lists map-typed, created as NVIDIA's
	// chart creates them (`helm install`: field manager "helm"), so that taking them over
	// changes fields another manager owns.
	mapTyped := mapTypedCRDs(t)
	for _, crd := range mapTyped {
		must(t, c.Create(ctx, crd.DeepCopy(), client.FieldOwner("helm")))
	}
	t.Cleanup(func() {
		for _, crd := range mapTyped {
			_ = c.Delete(context.Background(), crd.DeepCopy())
		}
	})
	waitListTypes(t, "map")

	ns := testCluster.Namespace(t, nil)
	cd := testutil.MakeComputeDomain("lists").Namespace(ns).NumNodes(4).Obj()
	must(t, c.Create(ctx, cd))
	t.Cleanup(func() { _ = c.Delete(context.Background(), cd) })
	const clique = "uuid-a.1"
	entries := make([]cdv1beta1.ComputeDomainDaemonInfo, 0, 18)
	for i := range 18 {
		entries = append(entries, cdv1beta1.ComputeDomainDaemonInfo{
			NodeName: fmt.Sprintf("node-%02d", i), IPAddress: fmt.Sprintf("127.0.1.%d", i+1), CliqueID: clique, Index: i, Status: cdv1beta1.StatusReady,
		})
	}
	applyStatus(t, cd, entries)
	// A whole-object update from another writer adds one entry, as NVIDIA's daemons add theirs.
	fresh := &cdv1beta1.ComputeDomain{}
	must(t, c.Get(ctx, client.ObjectKeyFromObject(cd), fresh))
	fresh.Status.Nodes = append(fresh.Status.Nodes, cdv1beta1.ComputeDomainNode{Name: "node-nvidia", IPAddress: "127.0.1.99", CliqueID: clique, Index: 18, Status: cdv1beta1.StatusNotReady})
	must(t, c.Status().Update(ctx, fresh, client.FieldOwner("compute-domain-daemon")))
	cq := applyClique(t, cd, clique, entries)
	if !hasPerEntryFields(t, cd, cq) {
		t.Fatal("with the map-typed lists, no per-entry managed fields were recorded: the test does not start where an old installation is")
	}
	wantNodes := nodeNames(t, cd)
	if len(wantNodes) != 19 {
		t.Fatalf("status.nodes before the conversion: %d entries %v, want 19", len(wantNodes), wantNodes)
	}

	// Taking the CRDs over converts them; nothing of the objects is lost.
	must(t, m.InstallPrerequisites(ctx, nil))
	waitListTypes(t, "atomic")
	if got := nodeNames(t, cd); !slices.Equal(got, wantNodes) {
		t.Errorf("status.nodes after the conversion: %v, want %v", got, wantNodes)
	}
	if got := daemonNames(t, cq); len(got) != len(entries) {
		t.Errorf("clique daemons after the conversion: %v, want %d entries", got, len(entries))
	}

	// The controller's next apply replaces each list whole: node-00 has left, node-18 joined,
	// and the entry another writer added is gone with the rest of what the controller did not
	// write.
	next := append(slices.Clone(entries[1:]), cdv1beta1.ComputeDomainDaemonInfo{NodeName: "node-18", IPAddress: "127.0.1.19", CliqueID: clique, Index: 0, Status: cdv1beta1.StatusNotReady})
	applyStatus(t, cd, next)
	applyClique(t, cd, clique, next)
	want := namesOf(next)
	if got := nodeNames(t, cd); !slices.Equal(got, want) {
		t.Errorf("status.nodes after the controller's apply on the atomic list: %v, want %v", got, want)
	}
	if got := daemonNames(t, cq); !slices.Equal(got, want) {
		t.Errorf("clique daemons after the controller's apply on the atomic list: %v, want %v", got, want)
	}
	if hasPerEntryFields(t, cd, cq) {
		t.Error("per-entry managed fields remain after the controller's apply on the atomic lists")
	}

	must(t, c.Delete(ctx, cd))
}

// mapTypedCRDs returns the chart's two CRDs with status.nodes and daemons declared as
// map-typed lists, as NVIDIA's CRDs and cdplane's before 0.2.0 declare them.
func mapTypedCRDs(t *testing.T) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	manifests, err := lifecycle.RenderPrerequisites(nil)
	must(t, err)
	keys := map[string][]string{
		"computedomains.resource.nvidia.com":       {"status", "nodes", "name"},
		"computedomaincliques.resource.nvidia.com": {"daemons", "nodeName"},
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, mf := range manifests {
		path, ok := keys[mf.Object.GetName()]
		if mf.Object.GetKind() != "CustomResourceDefinition" || !ok {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(mf.Object.Object, crd))
		crd.Annotations, crd.Labels = nil, nil // outside Helm, as NVIDIA's chart leaves them
		for i := range crd.Spec.Versions {
			props := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties
			var list apiextensionsv1.JSONSchemaProps
			if len(path) == 3 {
				list = props[path[0]].Properties[path[1]]
			} else {
				list = props[path[0]]
			}
			if list.XListType == nil || *list.XListType != "atomic" {
				t.Fatalf("CRD %s: %s is not an atomic list in this release's chart", crd.Name, strings.Join(path[:len(path)-1], "."))
			}
			mapType := "map"
			list.XListType, list.XListMapKeys = &mapType, []string{path[len(path)-1]}
			if len(path) == 3 {
				parent := props[path[0]]
				parent.Properties[path[1]] = list
				props[path[0]] = parent
			} else {
				props[path[0]] = list
			}
		}
		out = append(out, crd)
	}
	if len(out) != 2 {
		t.Fatalf("found %d of the two CRDs in the rendered prerequisites", len(out))
	}
	return out
}

// waitListTypes waits until the API server serves the two lists with the given list type:
// server-side apply uses the schema it has loaded, a little after the CRD was written.
func waitListTypes(t *testing.T, listType string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "the lists served as "+listType, func() (bool, error) {
		var got []string
		for _, name := range []string{"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"} {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := testCluster.Client.Get(context.Background(), client.ObjectKey{Name: name}, crd); err != nil {
				return false, err
			}
			props := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
			list := props["daemons"]
			if st, ok := props["status"]; ok {
				list = st.Properties["nodes"]
			}
			lt := ""
			if list.XListType != nil {
				lt = *list.XListType
			}
			got = append(got, lt)
			established := false
			for _, cond := range crd.Status.Conditions {
				established = established || (cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue)
			}
			if !established {
				return false, errors.New(name + " not established")
			}
		}
		return got[0] == listType && got[1] == listType, fmt.Errorf("list types %v", got)
	})
}

// applyStatus applies status.nodes as the controller does (its field manager, forced).
func applyStatus(t *testing.T, cd *cdv1beta1.ComputeDomain, entries []cdv1beta1.ComputeDomainDaemonInfo) {
	t.Helper()
	st := cdv1beta1.ComputeDomainStatus{Status: cdv1beta1.StatusNotReady}
	for _, e := range entries {
		st.Nodes = append(st.Nodes, cdv1beta1.ComputeDomainNode{Name: e.NodeName, IPAddress: e.IPAddress, CliqueID: e.CliqueID, Index: e.Index, Status: e.Status})
	}
	must(t, testCluster.Client.Status().Apply(context.Background(), computedomain.StatusApply(cd, st), client.FieldOwner(controllerManager), client.ForceOwnership))
}

// applyClique applies a clique's daemons as the controller does, and returns the clique.
func applyClique(t *testing.T, cd *cdv1beta1.ComputeDomain, clique string, entries []cdv1beta1.ComputeDomainDaemonInfo) *cdv1beta1.ComputeDomainClique {
	t.Helper()
	name := string(cd.UID) + "." + clique
	ac := cdapply.ComputeDomainClique(name, cd.Namespace).WithTotalDaemons(int32(len(entries)))
	for _, e := range entries {
		ac.WithDaemons(cdapply.ComputeDomainDaemonInfo().WithNodeName(e.NodeName).WithIPAddress(e.IPAddress).WithCliqueID(e.CliqueID).WithIndex(e.Index).WithStatus(e.Status))
	}
	must(t, testCluster.Client.Apply(context.Background(), ac, client.FieldOwner(controllerManager), client.ForceOwnership))
	return &cdv1beta1.ComputeDomainClique{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cd.Namespace}}
}

func nodeNames(t *testing.T, cd *cdv1beta1.ComputeDomain) []string {
	t.Helper()
	got := &cdv1beta1.ComputeDomain{}
	must(t, testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(cd), got))
	var names []string
	for _, n := range got.Status.Nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names
}

func daemonNames(t *testing.T, cq *cdv1beta1.ComputeDomainClique) []string {
	t.Helper()
	got := &cdv1beta1.ComputeDomainClique{}
	must(t, testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(cq), got))
	var names []string
	for _, d := range got.Daemons {
		names = append(names, d.NodeName)
	}
	slices.Sort(names)
	return names
}

func namesOf(entries []cdv1beta1.ComputeDomainDaemonInfo) []string {
	var names []string
	for _, e := range entries {
		names = append(names, e.NodeName)
	}
	slices.Sort(names)
	return names
}

// hasPerEntryFields says whether the domain's or the clique's managed fields record a list
// entry by key (`k:{"name":…}` / `k:{"nodeName":…}`), as they do for a map-typed list.
func hasPerEntryFields(t *testing.T, cd *cdv1beta1.ComputeDomain, cq *cdv1beta1.ComputeDomainClique) bool {
	t.Helper()
	for _, obj := range []client.Object{cd, cq} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(cdv1beta1.GroupVersion.WithKind(map[bool]string{true: "ComputeDomain", false: "ComputeDomainClique"}[obj == client.Object(cd)]))
		must(t, testCluster.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), u))
		for _, mf := range u.GetManagedFields() {
			raw := mf.FieldsV1.GetRawString()
			if strings.Contains(raw, `k:{\"name\"`) || strings.Contains(raw, `k:{\"nodeName\"`) {
				return true
			}
		}
	}
	return false
}
