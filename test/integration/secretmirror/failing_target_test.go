package secretmirror

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// refuseSecretWrites makes the apiserver refuse every create and update of a Secret in ns, with
// a ValidatingAdmissionPolicy and its binding, and waits until a dry-run create is refused. It
// returns the policy's name and a function that removes both and waits until writes pass.
func (e *env) refuseSecretWrites(ns string) (string, func()) {
	e.T.Helper()
	name := "sm-refuse-" + ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "false",
				Message:    "Secret writes are refused in this namespace for the test",
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := e.C.Create(e.Ctx(), o); err != nil {
			e.T.Fatal(err)
		}
	}
	removed := false
	remove := func() {
		if removed {
			return
		}
		removed = true
		for _, o := range []client.Object{binding, policy} {
			if err := e.C.Delete(context.Background(), o); client.IgnoreNotFound(err) != nil {
				e.T.Errorf("deleting %s: %v", o.GetName(), err)
			}
		}
	}
	e.T.Cleanup(remove)
	e.Eventually(30*time.Second, "Secret writes refused in "+ns, func() (bool, error) {
		return e.probeWrite(ns) != nil, nil
	})
	return name, func() {
		e.T.Helper()
		remove()
		e.Eventually(30*time.Second, "Secret writes allowed in "+ns, func() (bool, error) {
			err := e.probeWrite(ns)
			return err == nil, err
		})
	}
}

// probeWrite creates a Secret in ns as a dry run: admission runs, nothing is stored.
func (e *env) probeWrite(ns string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}
	return e.C.Create(context.Background(), s, client.DryRunAll)
}

// TestFailingTargetIsRetried: one assigned namespace refuses Secret writes (a real admission
// policy in the apiserver). The other target is written all the same, the refused one is tried
// again and again (the apiserver counts the policy's denials; the mirror's resync interval is 10
// minutes, so only the returned error can bring the retries), and once the policy is removed the
// copy arrives.
func TestFailingTargetIsRetried(t *testing.T) {
	t.Parallel()
	e := newPlane(t)
	// Names sort the refusing namespace first: it fails before the other is written.
	blocked, open := e.target("sm-a-blocked-"), e.target("sm-b-open-")
	policy, unblock := e.refuseSecretWrites(blocked)
	denials := map[string]string{"policy": policy, "enforcement_action": "deny"}
	const metric = "apiserver_validating_admission_policy_check_total"
	before := e.apiMetric(metric, denials)

	data := map[string]string{"token": "t"}
	e.createSource("creds", data)
	started := time.Now()
	e.start()
	e.waitCopy(open, "creds", data)
	e.Eventually(60*time.Second, "the refused target tried 3 times", func() (bool, error) {
		n := e.apiMetric(metric, denials) - before
		return n >= 3, fmt.Errorf("%.0f denials", n)
	})
	e.assertAbsent(blocked, "creds")
	t.Logf("%.0f refused attempts in %s", e.apiMetric(metric, denials)-before, time.Since(started).Round(time.Millisecond))

	unblock()
	unblocked := time.Now()
	e.waitCopy(blocked, "creds", data)
	t.Logf("copy written %s after the policy was removed", time.Since(unblocked).Round(time.Millisecond))
}
