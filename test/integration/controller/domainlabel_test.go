package controller

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller"
	"cdplane/internal/controller/domainlabel"
	"cdplane/internal/testutil"
)

// passCall is one request of a controller's client: the pass (reconcile) that sent it, its
// method and path, and the status code answered (0 when no answer came).
type passCall struct {
	pass   types.UID
	method string
	path   string
	code   int
}

// passLog records the requests one manager's client sends from within its controllers' passes,
// as their answers come.
type passLog struct {
	mu    sync.Mutex
	calls []passCall
}

func (l *passLog) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &passLogTransport{next: rt, log: l} })
	return cfg
}

func (l *passLog) list() []passCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]passCall(nil), l.calls...)
}

// reads returns the GETs of path, in the order answered.
func (l *passLog) reads(path string) []passCall {
	var out []passCall
	for _, c := range l.list() {
		if c.method == http.MethodGet && c.path == path {
			out = append(out, c)
		}
	}
	return out
}

// decided reports whether a pass that read path has ended (another pass read it after) with
// none of its requests answered 409 Conflict.
func (l *passLog) decided(path string) bool {
	calls, reads := l.list(), l.reads(path)
	for i, r := range reads {
		ended := slices.ContainsFunc(reads[i+1:], func(later passCall) bool { return later.pass != r.pass })
		disturbed := slices.ContainsFunc(calls, func(c passCall) bool { return c.pass == r.pass && c.code == http.StatusConflict })
		if ended && !disturbed {
			return true
		}
	}
	return false
}

type passLogTransport struct {
	next http.RoundTripper
	log  *passLog
}

func (t *passLogTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	pass := ctrlcontroller.ReconcileIDFromContext(req.Context())
	if pass == "" {
		return resp, err
	}
	call := passCall{pass: pass, method: req.Method, path: req.URL.Path}
	if err == nil {
		call.code = resp.StatusCode
	}
	t.log.mu.Lock()
	t.log.calls = append(t.log.calls, call)
	t.log.mu.Unlock()
	return resp, err
}

// TestControllerLabelsDomainsWithoutMutatingPolicy: where no MutatingAdmissionPolicy stamps a
// ComputeDomain's plane label (Kubernetes before 1.36; this cluster runs no admission policy at
// all), the plane's controller labels the unlabelled domains of the namespaces assigned to it
// and then reconciles them; domains in another plane's namespace or in an unassigned one keep
// no label, and the legacy plane, which selects unlabelled domains, leaves alone the one whose
// namespace is assigned to a named plane. Reconciles come in no particular order: each domain's
// outcome is waited for on its own, a domain left alone by a plane once that plane has decided on
// it (see passedOver).
func TestControllerLabelsDomainsWithoutMutatingPolicy(t *testing.T) {
	t.Parallel()
	const id, otherID = "labeller-a", "labeller-b"
	planeWire, legacyWire := &passLog{}, &passLog{}
	e := newEnvVia(t, true, planeWire.wrap(testCluster.Config),
		func(o *controller.Options) { o.ControlPlaneID, o.LabelDomains = id, domainlabel.Always })
	// The legacy plane's controller, selecting this test's domains too.
	newEnvVia(t, true, legacyWire.wrap(testCluster.Config), func(o *controller.Options) {
		o.DomainSelector = labels.SelectorFromSet(labels.Set{"cdplane.test/env": e.selector})
	})
	assigned := testCluster.Namespace(t, map[string]string{cdv1beta1.ControlPlaneLabel: id})
	foreign := testCluster.Namespace(t, map[string]string{cdv1beta1.ControlPlaneLabel: otherID})

	create := func(name, ns string) *cdv1beta1.ComputeDomain {
		t.Helper()
		cd := testutil.MakeComputeDomain(name).Namespace(ns).Label("cdplane.test/env", e.selector).Obj()
		if err := e.c.Create(e.ctx(), cd); err != nil {
			t.Fatal(err)
		}
		return cd
	}
	get := func(cd *cdv1beta1.ComputeDomain) (*cdv1beta1.ComputeDomain, error) {
		cur := &cdv1beta1.ComputeDomain{}
		return cur, e.c.Get(e.ctx(), client.ObjectKeyFromObject(cd), cur)
	}
	// labelled says whether cd has a plane label; labelledOrTaken, or a finalizer too.
	labelled := func(cd *cdv1beta1.ComputeDomain) bool {
		cur, err := get(cd)
		_, ok := cur.Labels[cdv1beta1.ControlPlaneLabel]
		return err == nil && ok
	}
	labelledOrTaken := func(cd *cdv1beta1.ComputeDomain) bool {
		cur, err := get(cd)
		return labelled(cd) || (err == nil && len(cur.Finalizers) > 0)
	}
	// passedOver waits until each plane, on the wire of its own client, has decided on cd and
	// is done with that decision, or until cd is wrongly taken (the checks after it report).
	// Deciding on an unlabelled domain is reading its namespace from the apiserver, once per
	// pass: the labeller to see whether the namespace is its plane's, the legacy plane whether
	// it is anyone's. A plane's passes over one domain never overlap, so a pass that read the
	// namespace has ended, whatever it was to write written, once another pass has read it (cd
	// is touched after the first read, to make sure there is another); and it decided
	// undisturbed unless one of its requests met a conflict (the touch changed cd under it: the
	// pass after it decides again).
	passedOver := func(cd *cdv1beta1.ComputeDomain, taken func(*cdv1beta1.ComputeDomain) bool, planes map[string]*passLog) {
		t.Helper()
		nsPath := "/api/v1/namespaces/" + cd.Namespace
		each := func(done func(*passLog) bool) func() (bool, error) {
			return func() (bool, error) {
				for name, l := range planes {
					if !done(l) {
						return taken(cd), fmt.Errorf("%s has not decided on %s", name, cd.Name)
					}
				}
				return true, nil
			}
		}
		e.eventually(2*time.Minute, "the planes read the namespace of "+cd.Name, each(func(l *passLog) bool { return len(l.reads(nsPath)) > 0 }))
		poke := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"cdplane.test/poke":"again"}}}`))
		if err := e.c.Patch(e.ctx(), cd.DeepCopy(), poke); err != nil {
			t.Fatal(err)
		}
		e.eventually(2*time.Minute, "the planes decided on "+cd.Name+" and are done", each(func(l *passLog) bool { return l.decided(nsPath) }))
	}
	inForeign := create("foreign", foreign)
	inAssigned := create("assigned", assigned)
	inLegacy := create("legacy", e.ns)

	e.eventually(2*time.Minute, "the domain in the assigned namespace labelled for the plane and taken (finalizer)", func() (bool, error) {
		cur, err := get(inAssigned)
		return err == nil && cur.Labels[cdv1beta1.ControlPlaneLabel] == id && controllerutil.ContainsFinalizer(cur, cdv1beta1.Finalizer), err
	})
	e.eventually(2*time.Minute, "the domain in the unassigned namespace taken by the legacy plane", func() (bool, error) {
		cur, err := get(inLegacy)
		return err == nil && controllerutil.ContainsFinalizer(cur, cdv1beta1.Finalizer), err
	})
	passedOver(inLegacy, labelled, map[string]*passLog{"plane " + id: planeWire})
	if cur, err := get(inLegacy); err != nil || cur.Labels[cdv1beta1.ControlPlaneLabel] != "" {
		t.Errorf("domain in an unassigned namespace: labels %v (err %v), want no plane label", cur.Labels, err)
	}
	passedOver(inForeign, labelledOrTaken, map[string]*passLog{"plane " + id: planeWire, "the legacy plane": legacyWire})
	cur, err := get(inForeign)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := cur.Labels[cdv1beta1.ControlPlaneLabel]; ok || len(cur.Finalizers) > 0 {
		t.Errorf("domain in plane %s's namespace (whose controller does not run): label %q, finalizers %v; want neither plane %s nor the legacy plane to touch it",
			otherID, v, cur.Finalizers, id)
	}
}

// TestAutoLabelsUntilTheMutatingPolicyIsInstalled: --label-domains=auto turns the labeller off
// only where the apiserver serves MutatingAdmissionPolicy v1 and the prerequisites' policy is
// there. A cluster upgraded to 1.36 without `cdplane apply prerequisites` serves the kind but
// holds no such policy: the labeller stays on, and says why and what to run.
func TestAutoLabelsUntilTheMutatingPolicyIsInstalled(t *testing.T) {
	ctx := context.Background()
	cfg := testCluster.Config
	served, err := domainlabel.MutatingPolicyServed(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !served {
		// Kubernetes before 1.36: auto labels, saying why.
		on, why, err := domainlabel.Enabled(ctx, cfg, domainlabel.Auto, "p")
		if err != nil || !on || !strings.Contains(why, "no MutatingAdmissionPolicy v1") {
			t.Fatalf("auto where the kind is not served: %t, %q, %v; want on", on, why, err)
		}
		return
	}
	for _, tc := range []struct {
		mode domainlabel.Mode
		id   string
		want bool
	}{{domainlabel.Never, "p", false}, {domainlabel.Always, "p", true}, {domainlabel.Auto, "", false}} {
		if on, _, err := domainlabel.Enabled(ctx, cfg, tc.mode, tc.id); err != nil || on != tc.want {
			t.Errorf("Enabled(%s, %q) = %t, %v; want %t", tc.mode, tc.id, on, err, tc.want)
		}
	}
	on, why, err := domainlabel.Enabled(ctx, cfg, domainlabel.Auto, "p")
	if err != nil || !on || !strings.Contains(why, "is not installed (run `cdplane apply prerequisites`") {
		t.Fatalf("auto without the policy installed: %t, %q, %v; want on, saying what to run", on, why, err)
	}

	// The policy's name is what counts; this one matches nothing and has no binding, so that it
	// stamps nothing on the other tests' domains.
	cs := kubernetes.NewForConfigOrDie(cfg)
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: domainlabel.MutatingPolicyName},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"cdplane.test"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}},
				},
			}}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "Object{}"}}},
		},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	})
	if on, why, err := domainlabel.Enabled(ctx, cfg, domainlabel.Auto, "p"); err != nil || on {
		t.Errorf("auto with the policy installed: %t, %q, %v; want off", on, why, err)
	}
}
