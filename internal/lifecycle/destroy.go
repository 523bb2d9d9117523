package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	charts "cdplane/deployments/helm"
	"cdplane/internal/plane"
)

// DestroyPlane removes control plane id. It refuses while the plane has ComputeDomains unless
// deleteDomains, which deletes them (each re-checked right before) and waits until their
// finalizers ran, while the plane's controller still runs. Then it unassigns the plane's
// namespaces and nodes, uninstalls its release and deletes its driver namespace (re-checked
// right before), and finally looks for anything left carrying the plane's label or a canonical
// name of the plane, which it reports rather than sweeps. Shared parts are never touched.
func (m *Manager) DestroyPlane(ctx context.Context, id string, deleteDomains bool) error {
	if err := plane.ValidateID(id); err != nil {
		return err
	}
	release, ns := PlaneRelease(id)
	m.progress("Checking %s (Helm release %s in namespace %s)", describePlane(id), release, ns)
	rel, err := m.release(release, ns)
	if err != nil {
		return err
	}
	nsObj, err := m.getNamespace(ctx, ns)
	if err != nil {
		return err
	}
	if nsObj != nil {
		if err := CheckNamespace(id, ns, nsObject(nsObj)); err != nil {
			return fmt.Errorf("not destroying: %w", err)
		}
	}
	domains, err := m.domains(ctx, id)
	if err != nil {
		return err
	}
	if !deleteDomains {
		if err := DomainsBlockingDestroy(id, domains); err != nil {
			return err
		}
	}
	if rel == nil && nsObj == nil && len(domains) == 0 {
		residue, err := m.residue(ctx, id)
		if err != nil {
			return err
		}
		if len(residue) == 0 {
			return fmt.Errorf("%s is not installed (no release %s/%s, no namespace %s)", describePlane(id), ns, release, ns)
		}
	}

	// Checks passed: the first change. From here on, a failure names what is done and the
	// command that finishes the job: the same destroy again.
	again := commandLine("destroy plane", id)
	if deleteDomains {
		again += " --delete-domains"
	}
	var done []string
	partial := func(err error, notDone string) error {
		if len(done) == 0 {
			return err
		}
		return &PartialError{Err: err, Done: done, NotDone: notDone, Finish: again}
	}
	requested, err := m.deleteDomains(ctx, id, domains)
	if requested > 0 {
		done = append(done, fmt.Sprintf("deletion of %d ComputeDomains requested", requested))
	}
	if err != nil {
		return partial(err, "the ComputeDomains finalized; the plane's namespaces and nodes unassigned; its release and namespace removed")
	}
	if id != "" {
		if err := m.unassignAll(ctx, id, ns); err != nil {
			return partial(err, "the plane's namespaces and nodes unassigned; its release and namespace removed")
		}
		done = append(done, "the plane's namespaces and nodes unassigned")
	}
	if rel != nil {
		m.progress("Uninstalling Helm release %s/%s", ns, release)
		if err := m.uninstall(release, ns); err != nil {
			if state := m.releaseState(release, ns); state != "" {
				done = append(done, state)
			}
			return partial(err, "the Helm release's objects removed; namespace "+ns+" deleted")
		}
		done = append(done, "Helm release "+ns+"/"+release+" uninstalled")
	}
	if err := m.deleteNamespace(ctx, id, ns); err != nil {
		return partial(err, "namespace "+ns+" deleted")
	}
	residue, err := m.residue(ctx, id)
	if err != nil {
		return partial(err, "checking that nothing of the plane is left")
	}
	if len(residue) > 0 {
		return fmt.Errorf("%s is uninstalled, but these objects remain: %s", describePlane(id), strings.Join(residue, ", "))
	}
	m.progress("%s is destroyed", describePlane(id))
	return nil
}

// domains lists the plane's ComputeDomains: those carrying its label (the legacy plane: none).
func (m *Manager) domains(ctx context.Context, id string) ([]cdv1beta1.ComputeDomain, error) {
	list := &cdv1beta1.ComputeDomainList{}
	if err := m.c.List(ctx, list, client.MatchingLabelsSelector{Selector: plane.Selector(id)}); err != nil {
		if apierrors.IsNotFound(err) || strings.Contains(err.Error(), "no matches for kind") {
			return nil, nil
		}
		return nil, fmt.Errorf("listing the ComputeDomains of %s: %w", describePlane(id), err)
	}
	return list.Items, nil
}

// deleteDomains deletes each domain after a fresh read confirms it is still the plane's, then
// waits until all are gone.
// It returns how many deletions it requested.
func (m *Manager) deleteDomains(ctx context.Context, id string, domains []cdv1beta1.ComputeDomain) (int, error) {
	if len(domains) == 0 {
		return 0, nil
	}
	m.progress("Deleting %d ComputeDomains of %s", len(domains), describePlane(id))
	requested := 0
	for _, cd := range domains {
		cur := &cdv1beta1.ComputeDomain{}
		if err := m.c.Get(ctx, client.ObjectKeyFromObject(&cd), cur); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return requested, fmt.Errorf("reading ComputeDomain %s/%s: %w", cd.Namespace, cd.Name, err)
		}
		if !plane.Owns(id, cur.Labels) {
			m.progress("  skipping %s/%s: no longer %s's", cd.Namespace, cd.Name, describePlane(id))
			continue
		}
		err := m.c.Delete(ctx, cur, client.Preconditions{UID: &cur.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			return requested, fmt.Errorf("deleting ComputeDomain %s/%s: %w", cd.Namespace, cd.Name, err)
		}
		requested++
	}
	return requested, m.waitFor(ctx, "the ComputeDomains' finalizers (the controller cleans up their daemons and templates)", func(ctx context.Context) (bool, string, error) {
		var left []string
		for _, cd := range domains {
			cur := &cdv1beta1.ComputeDomain{}
			err := m.c.Get(ctx, client.ObjectKeyFromObject(&cd), cur)
			if apierrors.IsNotFound(err) || (err == nil && cur.UID != cd.UID) {
				continue
			}
			if err != nil {
				return false, "", err
			}
			left = append(left, cd.Namespace+"/"+cd.Name)
		}
		return len(left) == 0, fmt.Sprintf("%d of %d left: %s", len(left), len(domains), strings.Join(first(left, 5), ", ")), nil
	})
}

// unassignAll unassigns every namespace (but the driver namespace) and node labelled for the
// plane, removing its RoleBindings and mirrored Secrets there, and forgets every node recorded
// for it.
func (m *Manager) unassignAll(ctx context.Context, id, driverNS string) error {
	sel := client.MatchingLabels{cdv1beta1.ControlPlaneLabel: id}
	nss := &corev1.NamespaceList{}
	if err := m.c.List(ctx, nss, sel); err != nil {
		return fmt.Errorf("listing the namespaces of %s: %w", describePlane(id), err)
	}
	nodes := &corev1.NodeList{}
	if err := m.c.List(ctx, nodes, sel); err != nil {
		return fmt.Errorf("listing the nodes of %s: %w", describePlane(id), err)
	}
	var targets []Target
	for _, ns := range nss.Items {
		if ns.Name != driverNS {
			targets = append(targets, Target{Kind: KindNamespace, Name: ns.Name})
		}
	}
	for _, n := range nodes.Items {
		targets = append(targets, Target{Kind: KindNode, Name: n.Name})
	}
	if len(targets) > 0 {
		m.progress("Unassigning %d namespaces and nodes from %s", len(targets), describePlane(id))
	}
	for _, t := range targets {
		res, err := Unassign(ctx, m.c, id, t, false)
		if err != nil {
			return fmt.Errorf("unassigning %s: %w", t, err)
		}
		for _, line := range res.Changes {
			m.progress("  %s", line)
		}
	}
	// Recorded nodes that are gone or lost their label are the plane's no more.
	res := &Result{}
	if err := forgetNodes(ctx, m.c, id, func(string) bool { return true }, res); err != nil {
		return err
	}
	for _, line := range res.Changes {
		m.progress("  %s", line)
	}
	return nil
}

// deleteNamespace deletes the plane's driver namespace after a fresh read confirms it is the
// plane's (a legacy namespace cdplane did not create is left, and said so), then waits for it.
func (m *Manager) deleteNamespace(ctx context.Context, id, name string) error {
	ns, err := m.getNamespace(ctx, name)
	if err != nil || ns == nil {
		return err
	}
	if err := CheckNamespace(id, name, nsObject(ns)); err != nil {
		m.progress("Leaving namespace %s: %v", name, err)
		return nil
	}
	m.progress("Deleting namespace %s", name)
	if err := m.c.Delete(ctx, ns, client.Preconditions{UID: &ns.UID, ResourceVersion: &ns.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", name, err)
	}
	return m.waitFor(ctx, "namespace "+name+" to be gone", func(ctx context.Context) (bool, string, error) {
		cur, err := m.getNamespace(ctx, name)
		if err != nil {
			return false, "", err
		}
		if cur == nil || cur.UID != ns.UID {
			return true, "", nil
		}
		return false, terminating(cur), nil
	})
}

// residue lists what is left of plane id: objects carrying its label (a plane with an id), and
// cluster-scoped objects under its canonical names.
func (m *Manager) residue(ctx context.Context, id string) ([]string, error) {
	var out []string
	if id != "" {
		sel := client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{cdv1beta1.ControlPlaneLabel: id})}
		lists := map[string]client.ObjectList{
			"Namespace": &corev1.NamespaceList{}, "Node": &corev1.NodeList{}, "Secret": &corev1.SecretList{},
			"ClusterRole": &rbacv1.ClusterRoleList{}, "ClusterRoleBinding": &rbacv1.ClusterRoleBindingList{},
			"RoleBinding": &rbacv1.RoleBindingList{}, "Role": &rbacv1.RoleList{}, "DaemonSet": &appsv1.DaemonSetList{},
			"ResourceClaimTemplate": &resourcev1.ResourceClaimTemplateList{}, "ComputeDomain": &cdv1beta1.ComputeDomainList{},
			"ComputeDomainClique": &cdv1beta1.ComputeDomainCliqueList{},
		}
		for kind, list := range lists {
			if err := m.c.List(ctx, list, sel); meta.IsNoMatchError(err) {
				continue // the API is not served (the prerequisites are gone): none left
			} else if err != nil {
				return nil, fmt.Errorf("listing %ss of %s: %w", kind, describePlane(id), err)
			}
			for _, o := range items(list) {
				out = append(out, fmt.Sprintf("%s %s", kind, client.ObjectKeyFromObject(o)))
			}
		}
	}
	release, ns := PlaneRelease(id)
	// Only the names of what the chart renders are read: the image (required, not a name) is a
	// stand-in.
	manifests, err := charts.Render(charts.Plane, release, ns, map[string]any{"controlPlaneID": id, "image": map[string]any{"repository": "names-only"}})
	if err != nil {
		return nil, err
	}
	for _, mf := range manifests {
		if mf.Object.GetNamespace() != "" {
			continue
		}
		cur, err := m.current(ctx, mf.Object)
		if err != nil {
			return nil, err
		}
		if cur != nil {
			out = append(out, fmt.Sprintf("%s %s", mf.Object.GetKind(), mf.Object.GetName()))
		}
	}
	sort.Strings(out)
	return dedupe(out), nil
}

func items(list client.ObjectList) []client.Object {
	objs, _ := meta.ExtractList(list)
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		if co, ok := o.(client.Object); ok {
			out = append(out, co)
		}
	}
	return out
}

func dedupe(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// terminating describes what a terminating namespace still waits for, from its conditions.
func terminating(ns *corev1.Namespace) string {
	var msgs []string
	for _, c := range ns.Status.Conditions {
		if c.Status == corev1.ConditionTrue && c.Message != "" {
			msgs = append(msgs, c.Message)
		}
	}
	if len(msgs) == 0 {
		return "terminating"
	}
	return "terminating: " + strings.Join(msgs, "; ")
}
