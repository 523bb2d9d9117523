package lifecycle

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

func domain(name string, plane *string, deleting bool) *cdv1beta1.ComputeDomain {
	w := testutil.MakeComputeDomain(name).Namespace("ns")
	if plane != nil {
		w = w.Label(cdv1beta1.ControlPlaneLabel, *plane)
	}
	cd := w.Obj()
	if deleting {
		cd.DeletionTimestamp = &metav1.Time{}
	}
	return cd
}

func labelled(id string) map[string]string {
	return map[string]string{cdv1beta1.ControlPlaneLabel: id, "other": "x"}
}

func str(s string) *string { return &s }

// checkRefusal compares an error with a wanted refusal: "" wants no error; otherwise a
// RefusedError (or, when wantPlain, any error) containing want.
func checkRefusal(t *testing.T, err error, want string, wantPlain bool) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want == "":
	case err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	case IsRefused(err) == wantPlain:
		t.Fatalf("error %q: refused %v, want refused %v", err, IsRefused(err), !wantPlain)
	}
}

func TestCheckAssign(t *testing.T) {
	ns := Target{Kind: KindNamespace, Name: "team"}
	node := Target{Kind: KindNode, Name: "n1"}
	cases := map[string]struct {
		target  Target
		id      string
		labels  map[string]string
		domains []*cdv1beta1.ComputeDomain
		want    string // "" admits
		plain   bool   // not a RefusedError: a bad id
		already bool
	}{
		"unlabelled and empty":             {target: ns, id: "plane-a"},
		"already the plane's":              {target: ns, id: "plane-a", labels: labelled("plane-a"), already: true},
		"own domains do not block":         {target: ns, id: "plane-a", labels: labelled("plane-a"), domains: []*cdv1beta1.ComputeDomain{domain("a", str("plane-a"), false)}, already: true},
		"another plane owns it":            {target: ns, id: "plane-a", labels: labelled("plane-b"), want: `namespace team: owned by control plane "plane-b"; unassign it from that plane first`},
		"an empty label is not the legacy": {target: node, id: "plane-a", labels: labelled(""), want: `node n1: owned by an empty resource.nvidia.com/control-plane-id label`},
		"another plane's live domain": {target: ns, id: "plane-a", domains: []*cdv1beta1.ComputeDomain{domain("b", str("plane-b"), false)},
			want: `namespace team: holds live ComputeDomains of other control planes: ns/b (control plane "plane-b")`},
		"a live legacy domain": {target: ns, id: "plane-a", domains: []*cdv1beta1.ComputeDomain{domain("l", nil, false)},
			want: "ns/l (the legacy plane (no label))"},
		"a node serving another plane's domain": {target: node, id: "plane-a", domains: []*cdv1beta1.ComputeDomain{domain("b", str("plane-b"), false)},
			want: "node n1: serves live ComputeDomains of other control planes"},
		"domains being deleted do not block": {target: ns, id: "plane-a", domains: []*cdv1beta1.ComputeDomain{domain("b", str("plane-b"), true), domain("l", nil, true)}},
		"at most five named": {target: ns, id: "plane-a", domains: []*cdv1beta1.ComputeDomain{
			domain("d1", nil, false), domain("d2", nil, false), domain("d3", nil, false),
			domain("d4", nil, false), domain("d5", nil, false), domain("d6", nil, false), domain("d7", nil, false),
		}, want: "ns/d5 (the legacy plane (no label)) and 2 more"},
		"the plane's driver namespace": {target: Target{Kind: KindNamespace, Name: "plane-a-cdplane"}, id: "plane-a", labels: labelled("plane-a"),
			want: `namespace plane-a-cdplane: it is control plane "plane-a"'s driver namespace`},
		"kube-system": {target: Target{Kind: KindNamespace, Name: "kube-system"}, id: "plane-a",
			want: "namespace kube-system: it is a system namespace"},
		"default namespace": {target: Target{Kind: KindNamespace, Name: "default"}, id: "plane-a",
			want: "namespace default: it is a system namespace"},
		"kube-node-lease": {target: Target{Kind: KindNamespace, Name: "kube-node-lease"}, id: "plane-a",
			want: "it is a system namespace"},
		"any kube-* namespace": {target: Target{Kind: KindNamespace, Name: "kube-flannel"}, id: "plane-a",
			want: "namespace kube-flannel: it is a system namespace"},
		"kube without the dash is a name like any": {target: Target{Kind: KindNamespace, Name: "kubeflow"}, id: "plane-a"},
		"the legacy plane's driver namespace": {target: Target{Kind: KindNamespace, Name: "cdplane"}, id: "plane-a",
			want: "namespace cdplane: it is the legacy control plane's driver namespace"},
		"a node named like a system namespace":            {target: Target{Kind: KindNode, Name: "default"}, id: "plane-a"},
		"another plane's driver namespace is not special": {target: Target{Kind: KindNamespace, Name: "plane-b-cdplane"}, id: "plane-a"},
		"legacy id":  {target: ns, id: "", want: "a control-plane id is required", plain: true},
		"invalid id": {target: ns, id: "Plane-A", want: "must be lowercase", plain: true},
		"reserved":   {target: ns, id: "default", want: `"default" is reserved`, plain: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			already, err := CheckAssign(tc.target, tc.id, tc.labels, tc.domains)
			checkRefusal(t, err, tc.want, tc.plain)
			if already != tc.already {
				t.Errorf("already = %v, want %v", already, tc.already)
			}
		})
	}
}

func TestCheckUnassign(t *testing.T) {
	ns := Target{Kind: KindNamespace, Name: "team"}
	node := Target{Kind: KindNode, Name: "n1"}
	own := []*cdv1beta1.ComputeDomain{domain("a", str("plane-a"), false)}
	cases := map[string]struct {
		target  Target
		id      string
		labels  map[string]string
		domains []*cdv1beta1.ComputeDomain
		force   bool
		want    string
		plain   bool
		owned   bool
	}{
		"owned, no domains": {target: ns, id: "plane-a", labels: labelled("plane-a"), owned: true},
		"the plane's driver namespace": {target: Target{Kind: KindNamespace, Name: "plane-a-cdplane"}, id: "plane-a", labels: labelled("plane-a"), force: true,
			want: "driver namespace"},
		"unlabelled: nothing to do":     {target: ns, id: "plane-a", domains: own},
		"another plane owns it":         {target: ns, id: "plane-a", labels: labelled("plane-b"), force: true, want: `namespace team: owned by control plane "plane-b", not control plane "plane-a"`},
		"empty label":                   {target: ns, id: "plane-a", labels: labelled(""), want: "owned by an empty"},
		"own live domain":               {target: ns, id: "plane-a", labels: labelled("plane-a"), domains: own, want: `namespace team: still holds live ComputeDomains of control plane "plane-a": ns/a (control plane "plane-a"); delete them first, or unassign with force`},
		"own live domain on a node":     {target: node, id: "plane-a", labels: labelled("plane-a"), domains: own, want: "node n1: still serves live ComputeDomains"},
		"own live domain, forced":       {target: ns, id: "plane-a", labels: labelled("plane-a"), domains: own, force: true, owned: true},
		"own domain being deleted":      {target: ns, id: "plane-a", labels: labelled("plane-a"), domains: []*cdv1beta1.ComputeDomain{domain("a", str("plane-a"), true)}, owned: true},
		"other planes' domains ignored": {target: ns, id: "plane-a", labels: labelled("plane-a"), domains: []*cdv1beta1.ComputeDomain{domain("b", str("plane-b"), false), domain("l", nil, false)}, owned: true},
		"legacy id":                     {target: ns, id: "", want: "a control-plane id is required", plain: true},
		"invalid id":                    {target: node, id: "plane_a", want: "must be a DNS-1123 label", plain: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			owned, err := CheckUnassign(tc.target, tc.id, tc.labels, tc.domains, tc.force)
			checkRefusal(t, err, tc.want, tc.plain)
			if owned != tc.owned {
				t.Errorf("owned = %v, want %v", owned, tc.owned)
			}
		})
	}
}

func TestRoleBindings(t *testing.T) {
	type summary struct{ Name, Namespace, Role, SA, SANamespace, Label string }
	var got []summary
	for _, rb := range RoleBindings("plane-a", "team") {
		if len(rb.Subjects) != 1 {
			t.Fatalf("RoleBinding %s has %d subjects", rb.Name, len(rb.Subjects))
		}
		s := rb.Subjects[0]
		if s.Kind != rbacv1.ServiceAccountKind || rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.APIGroup != rbacv1.GroupName {
			t.Errorf("RoleBinding %s: subject %+v, roleRef %+v", rb.Name, s, rb.RoleRef)
		}
		got = append(got, summary{rb.Name, rb.Namespace, rb.RoleRef.Name, s.Name, s.Namespace, rb.Labels[cdv1beta1.ControlPlaneLabel]})
	}
	want := []summary{
		{"plane-a-cdplane-controller", "team", "plane-a-cdplane-controller-namespaced", "plane-a-cdplane-controller", "plane-a-cdplane", "plane-a"},
		{"plane-a-cdplane-daemon", "team", "plane-a-cdplane-daemon-namespaced", "plane-a-cdplane-daemon", "plane-a-cdplane", "plane-a"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RoleBindings (-want +got):\n%s", diff)
	}
	// The longest id keeps every derived name unhashed and within 63 characters.
	for _, rb := range RoleBindings(strings.Repeat("x", plane.MaxIDLength), "team") {
		for _, n := range []string{rb.Name, rb.RoleRef.Name, rb.Subjects[0].Name, rb.Subjects[0].Namespace} {
			if !strings.HasPrefix(n, strings.Repeat("x", plane.MaxIDLength)+"-cdplane") || len(n) > 63 {
				t.Errorf("derived name %q", n)
			}
		}
	}
}

func TestPlanRoleBinding(t *testing.T) {
	target := Target{Kind: KindNamespace, Name: "team"}
	desired := RoleBindings("plane-a", "team")[0]
	with := func(mutate func(*rbacv1.RoleBinding)) *rbacv1.RoleBinding {
		rb := desired.DeepCopy()
		mutate(rb)
		return rb
	}
	cases := map[string]struct {
		existing *rbacv1.RoleBinding
		want     BindingAction
		refused  string
	}{
		"absent":            {existing: nil, want: BindingCreate},
		"identical":         {existing: desired.DeepCopy(), want: BindingNone},
		"extra labels kept": {existing: with(func(rb *rbacv1.RoleBinding) { rb.Labels["team"] = "x" }), want: BindingNone},
		"subjects changed": {existing: with(func(rb *rbacv1.RoleBinding) {
			rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: "User", Name: "mallory"})
		}), want: BindingUpdate},
		"managed-by missing": {existing: with(func(rb *rbacv1.RoleBinding) { delete(rb.Labels, "app.kubernetes.io/managed-by") }), want: BindingUpdate},
		"roleRef changed":    {existing: with(func(rb *rbacv1.RoleBinding) { rb.RoleRef.Name = "cluster-admin" }), want: BindingRecreate},
		"unlabelled: not the plane's": {existing: with(func(rb *rbacv1.RoleBinding) { rb.Labels = nil }),
			refused: `RoleBinding team/plane-a-cdplane-controller exists and is not control plane "plane-a"'s (it carries the legacy plane (no label))`},
		"another plane's": {existing: with(func(rb *rbacv1.RoleBinding) { rb.Labels[cdv1beta1.ControlPlaneLabel] = "plane-b" }),
			refused: `(it carries control plane "plane-b")`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := PlanRoleBinding(target, "plane-a", tc.existing, desired)
			if tc.refused != "" {
				var r *RefusedError
				if !errors.As(err, &r) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("PlanRoleBinding = %q, %v; want a refusal containing %q", got, err, tc.refused)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PlanRoleBinding = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestValidateAssignment(t *testing.T) {
	long := strings.Repeat("a", 64)
	cases := map[string]struct {
		id      string
		target  Target
		want    string // "" admits
		refused bool   // a RefusedError rather than a plain error
	}{
		"namespace":                 {id: "plane-a", target: Target{Kind: KindNamespace, Name: "team-a"}},
		"node with dots":            {id: "plane-a", target: Target{Kind: KindNode, Name: "gpu-node-1.rack-2.example.com"}},
		"legacy id":                 {id: "", target: Target{Kind: KindNamespace, Name: "team-a"}, want: "a control-plane id is required (--control-plane-id)"},
		"uppercase id":              {id: "Plane-A", target: Target{Kind: KindNamespace, Name: "team-a"}, want: `invalid control-plane id "Plane-A": must be lowercase`},
		"reserved id":               {id: "default", target: Target{Kind: KindNode, Name: "n1"}, want: `"default" is reserved`},
		"id checked before name":    {id: "Plane-A", target: Target{Kind: KindNamespace, Name: ""}, want: "must be lowercase"},
		"empty namespace name":      {id: "plane-a", target: Target{Kind: KindNamespace, Name: ""}, want: "a namespace name is required"},
		"empty node name":           {id: "plane-a", target: Target{Kind: KindNode, Name: ""}, want: "a node name is required"},
		"uppercase namespace":       {id: "plane-a", target: Target{Kind: KindNamespace, Name: "Team"}, want: `invalid namespace name "Team"`},
		"namespace with a dot":      {id: "plane-a", target: Target{Kind: KindNamespace, Name: "team.a"}, want: `invalid namespace name "team.a"`},
		"namespace over 63":         {id: "plane-a", target: Target{Kind: KindNamespace, Name: long}, want: "must be no more than 63 characters"},
		"node over 63 is fine":      {id: "plane-a", target: Target{Kind: KindNode, Name: long}},
		"node with a slash":         {id: "plane-a", target: Target{Kind: KindNode, Name: "n1/../x"}, want: `invalid node name "n1/../x"`},
		"unknown kind":              {id: "plane-a", target: Target{Kind: "pod", Name: "p"}, want: `unknown kind of target "pod": want namespace or node`},
		"own driver namespace":      {id: "plane-a", target: Target{Kind: KindNamespace, Name: "plane-a-cdplane"}, want: `it is control plane "plane-a"'s driver namespace`, refused: true},
		"a node named like it":      {id: "plane-a", target: Target{Kind: KindNode, Name: "plane-a-cdplane"}},
		"legacy driver namespace":   {id: "plane-a", target: Target{Kind: KindNamespace, Name: "cdplane"}, want: "the legacy control plane's driver namespace", refused: true},
		"a system namespace":        {id: "plane-a", target: Target{Kind: KindNamespace, Name: "kube-public"}, want: "system namespace", refused: true},
		"another plane's namespace": {id: "plane-a", target: Target{Kind: KindNamespace, Name: "plane-b-cdplane"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := ValidateAssignment(tc.id, tc.target)
			checkRefusal(t, err, tc.want, !tc.refused)
		})
	}
}

// FuzzValidateAssignment: whatever the CLI is given as id and name, an admitted request names
// a valid plane and a name the apiserver would accept, so nothing malformed reaches a request
// path.
func FuzzValidateAssignment(f *testing.F) {
	for _, seed := range []struct{ id, kind, name string }{
		{"plane-a", "namespace", "team-a"},
		{"plane-a", "node", "gpu-1.example.com"},
		{"", "namespace", "team-a"},
		{"Plane-A", "namespace", "team-a"},
		{"default", "node", "n1"},
		{"plane-a", "namespace", ""},
		{"plane-a", "namespace", "plane-a-cdplane"},
		{"plane-a", "node", "n1/../x"},
		{"plane-a", "node", "../../secrets"},
		{"plane-a", "namespace", "team a"},
		{"plane-a", "node", "n1."},
		{"plane-a", "pod", "p"},
		{"plane-a-", "namespace", "x"},
	} {
		f.Add(seed.id, seed.kind, seed.name)
	}
	f.Fuzz(func(t *testing.T, id, kind, name string) {
		tgt := Target{Kind: TargetKind(kind), Name: name}
		err := ValidateAssignment(id, tgt)
		if err != nil {
			return
		}
		if id == "" || plane.ValidateID(id) != nil {
			t.Fatalf("admitted id %q", id)
		}
		limit := 253
		if tgt.Kind == KindNamespace {
			limit = 63
		} else if tgt.Kind != KindNode {
			t.Fatalf("admitted kind %q", kind)
		}
		if name == "" || len(name) > limit || strings.ContainsAny(name, "/ %\\\x00") || strings.ToLower(name) != name {
			t.Fatalf("admitted %s name %q", kind, name)
		}
		if tgt.Kind == KindNamespace && name == plane.Name(id, plane.DriverNamespaceLegacyName) {
			t.Fatalf("admitted plane %q's driver namespace", id)
		}
	})
}
