package secretmirror

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/secretmirror"
	"cdplane/internal/metrics"
)

// TestColdStartReplaysPreexistingSecrets: Secrets, stale copies and orphaned copies that exist
// before the controller starts converge right after start-up, long before the mirror's 10-minute
// resync: every selected source is copied into every assigned namespace, a stale copy is
// rewritten, a copy whose source was deleted while the controller was down is removed (found by
// the replay's namespaced list of the target), and nothing goes to a namespace of another plane
// or from an unselected Secret.
func TestColdStartReplaysPreexistingSecrets(t *testing.T) {
	t.Parallel()
	e := newPlane(t)
	t1, t2 := e.target("sm-t1-"), e.target("sm-t2-")
	otherPlane := e.namespace("sm-other-", map[string]string{cdv1beta1.ControlPlaneLabel: "sm-someone-else"})
	unassigned := e.namespace("sm-unassigned-", nil)

	sources := map[string]map[string]string{
		"alpha": {"token": "a1"},
		"beta":  {"token": "b2", "ca.crt": "cert"},
		"gamma": {},
	}
	for name, data := range sources {
		e.createSource(name, data)
	}
	e.createSecret(e.srcNS, "unselected", nil, map[string]string{"token": "private"})
	e.createCopy(t1, "beta", map[string]string{"token": "stale"})
	e.createCopy(t2, "orphan", map[string]string{"token": "source deleted while down"})

	started := time.Now()
	e.start()
	for _, ns := range []string{t1, t2} {
		for name, data := range sources {
			e.waitCopy(ns, name, data)
		}
	}
	e.waitGone(t2, "orphan")
	t.Logf("cold start converged in %s", time.Since(started).Round(time.Millisecond))

	for _, ns := range []string{t1, t2, otherPlane, unassigned} {
		e.assertAbsent(ns, "unselected")
	}
	for _, ns := range []string{otherPlane, unassigned} {
		list := &corev1.SecretList{}
		if err := e.C.List(e.Ctx(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 0 {
			t.Errorf("namespace %s not owned by the plane holds %d Secrets", ns, len(list.Items))
		}
	}
	got := e.waitCopy(t1, "alpha", sources["alpha"])
	if got := got.Labels[cdv1beta1.ControlPlaneLabel]; got != e.opts.ControlPlaneID {
		t.Errorf("copy plane label %q, want %q", got, e.opts.ControlPlaneID)
	}
	if got := got.Labels[secretmirror.MirroredFromLabel]; got != e.srcNS {
		t.Errorf("copy %s label %q, want %q", secretmirror.MirroredFromLabel, got, e.srcNS)
	}
}

// TestForeignSecretLeftIntactAndReported: a same-named Secret in an assigned namespace that does
// not carry the plane's marker (here it even carries the plane label: a label alone proves
// nothing) keeps its resourceVersion and data through the first sync and a later source change,
// is reported in the counter and as a Warning event on the source, and the other target is
// mirrored meanwhile. Once the foreign Secret is deleted, the copy is made at the next recheck.
func TestForeignSecretLeftIntactAndReported(t *testing.T) {
	t.Parallel()
	e := newPlane(t)
	e.opts.ForeignRecheckInterval = time.Second
	t1, t2 := e.target("sm-foreign-"), e.target("sm-t2-")
	theirs := map[string]string{"token": "theirs"}
	foreign := e.createSecret(t1, "creds", map[string]string{cdv1beta1.ControlPlaneLabel: e.opts.ControlPlaneID, "app": "theirs"}, theirs)

	e.start()
	e.createSource("creds", map[string]string{"token": "ours"})
	e.waitCopy(t2, "creds", map[string]string{"token": "ours"})
	e.Eventually(30*time.Second, "foreign target counted", func() (bool, error) {
		return e.metric(metrics.SecretMirrorForeignTargetsName) >= 1, nil
	})
	e.assertUntouched(t1, "creds", foreign.ResourceVersion, theirs)

	e.Eventually(30*time.Second, "ForeignTarget event on the source", func() (bool, error) {
		events := &eventsv1.EventList{}
		if err := e.C.List(context.Background(), events, client.InNamespace(e.srcNS)); err != nil {
			return false, err
		}
		for _, ev := range events.Items {
			if ev.Reason == secretmirror.ReasonForeignTarget && ev.Regarding.Name == "creds" && ev.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})

	// A source change reaches the owned target and still not the foreign one.
	before := e.metric(metrics.SecretMirrorForeignTargetsName)
	e.updateSecret(e.srcNS, "creds", func(s *corev1.Secret) { s.Data["token"] = []byte("ours-2") })
	e.waitCopy(t2, "creds", map[string]string{"token": "ours-2"})
	e.Eventually(30*time.Second, "foreign target counted again", func() (bool, error) {
		return e.metric(metrics.SecretMirrorForeignTargetsName) > before, nil
	})
	e.assertUntouched(t1, "creds", foreign.ResourceVersion, theirs)

	// The owner removes it: the plane's copy follows at the next recheck.
	if err := e.C.Delete(e.Ctx(), foreign); err != nil {
		t.Fatal(err)
	}
	e.waitCopy(t1, "creds", map[string]string{"token": "ours-2"})
}

// TestSourceDeletedRemovesCopies: deleting a source removes its copies from every target, a
// source that stops matching the selector loses its copies too, other sources' copies stay,
// and a foreign same-named Secret survives the sweep.
func TestSourceDeletedRemovesCopies(t *testing.T) {
	t.Parallel()
	e := newPlane(t)
	t1, t2, t3 := e.target("sm-t1-"), e.target("sm-t2-"), e.target("sm-t3-")
	foreign := e.createSecret(t3, "doomed", nil, map[string]string{"token": "theirs"})
	e.start()
	doomed := e.createSource("doomed", map[string]string{"token": "d"})
	e.createSource("kept", map[string]string{"token": "k"})
	e.createSource("unselected-later", map[string]string{"token": "u"})
	for _, ns := range []string{t1, t2} {
		e.waitCopy(ns, "doomed", map[string]string{"token": "d"})
		e.waitCopy(ns, "unselected-later", map[string]string{"token": "u"})
	}
	kept := e.waitCopy(t1, "kept", map[string]string{"token": "k"})

	if err := e.C.Delete(e.Ctx(), doomed); err != nil {
		t.Fatal(err)
	}
	e.updateSecret(e.srcNS, "unselected-later", func(s *corev1.Secret) { delete(s.Labels, mirrorLabel) })
	for _, ns := range []string{t1, t2} {
		e.waitGone(ns, "doomed")
		e.waitGone(ns, "unselected-later")
	}
	e.assertUntouched(t3, "doomed", foreign.ResourceVersion, map[string]string{"token": "theirs"})
	e.assertUntouched(t1, "kept", kept.ResourceVersion, map[string]string{"token": "k"})
}

// TestUnassignedNamespaceLosesItsCopy: removing the plane label from a namespace removes the
// copies there and leaves the other targets alone; assigning it back brings them back; moving it
// to another plane (label changed) removes them again.
func TestUnassignedNamespaceLosesItsCopy(t *testing.T) {
	t.Parallel()
	e := newPlane(t)
	t1, t2 := e.target("sm-t1-"), e.target("sm-t2-")
	e.createSource("creds", map[string]string{"token": "c"})
	e.start()
	kept := e.waitCopy(t1, "creds", map[string]string{"token": "c"})
	e.waitCopy(t2, "creds", map[string]string{"token": "c"})

	e.setNamespaceLabel(t2, cdv1beta1.ControlPlaneLabel, nil)
	e.waitGone(t2, "creds")
	e.assertUntouched(t1, "creds", kept.ResourceVersion, map[string]string{"token": "c"})

	e.setNamespaceLabel(t2, cdv1beta1.ControlPlaneLabel, ptr.To(e.opts.ControlPlaneID))
	e.waitCopy(t2, "creds", map[string]string{"token": "c"})

	e.setNamespaceLabel(t2, cdv1beta1.ControlPlaneLabel, ptr.To("sm-another-plane"))
	e.waitGone(t2, "creds")
	e.assertUntouched(t1, "creds", kept.ResourceVersion, map[string]string{"token": "c"})
}

// TestLegacyPlaneMirrorsOnlyIntoSelectedNamespaces: the legacy plane copies into unassigned
// namespaces matching its explicit selector only, with no plane label on the copies; a matching
// namespace assigned to a plane and an unselected namespace get nothing, and legacy copies left
// there are not touched (the mirror reads and writes Secrets in its targets only). A namespace
// that stops matching the selector loses its copy.
func TestLegacyPlaneMirrorsOnlyIntoSelectedNamespaces(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	selected := map[string]string{"cdplane.test/legacy-mirror": e.srcNS}
	e.opts.LegacyNamespaceSelector = labels.SelectorFromSet(selected)
	match := e.namespace("sm-legacy-match-", selected)
	unselected := e.namespace("sm-legacy-unselected-", nil)
	assigned := e.namespace("sm-legacy-assigned-", map[string]string{"cdplane.test/legacy-mirror": e.srcNS, cdv1beta1.ControlPlaneLabel: "sm-some-plane"})
	leftOver := map[string]string{"token": "left over"}
	leftUnselected := e.createCopy(unselected, "creds", leftOver)
	leftAssigned := e.createCopy(assigned, "creds", leftOver)
	e.createSource("creds", map[string]string{"token": "legacy"})

	e.start()
	got := e.waitCopy(match, "creds", map[string]string{"token": "legacy"})
	if v, has := got.Labels[cdv1beta1.ControlPlaneLabel]; has {
		t.Errorf("a legacy copy carries the plane label %q", v)
	}
	e.waitLog("the source reconciled", e.mirrored("creds"))
	e.assertUntouched(unselected, "creds", leftUnselected.ResourceVersion, leftOver)
	e.assertUntouched(assigned, "creds", leftAssigned.ResourceVersion, leftOver)

	e.setNamespaceLabel(match, "cdplane.test/legacy-mirror", ptr.To("something-else"))
	e.waitGone(match, "creds")
}

// TestLegacyPlaneWithoutSelectorMirrorsNowhere: with no namespace selector the legacy plane has
// no targets: once the source has been reconciled, no copy exists anywhere but the one left over
// before, untouched.
func TestLegacyPlaneWithoutSelectorMirrorsNowhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	ns := e.namespace("sm-legacy-none-", map[string]string{"cdplane.test/legacy-mirror": e.srcNS})
	leftOver := map[string]string{"token": "left over"}
	left := e.createCopy(ns, "creds", leftOver)
	e.createSource("creds", map[string]string{"token": "legacy"})
	e.start()
	e.waitLog("the source reconciled", e.mirrored("creds"))
	list := &corev1.SecretList{}
	if err := e.C.List(e.Ctx(), list, client.MatchingLabels{secretmirror.MirroredFromLabel: e.srcNS}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Namespace != ns {
		t.Errorf("%d copies exist, want only the one left over in %s", len(list.Items), ns)
	}
	e.assertUntouched(ns, "creds", left.ResourceVersion, leftOver)
}
