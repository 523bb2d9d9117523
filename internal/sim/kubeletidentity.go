package sim

import (
	"context"
	"fmt"
	"path/filepath"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The simulated kubelets' identity. A kubelet is not an administrator: kube-apiserver's
// priority and fairness classifies its requests in the `system` level, its Lease and node
// status writes in `node-high`, each level with its share of the apiserver's seats. As
// system:masters (the sim's administrator) every kubelet request would be exempt: in a large
// sim the kubelets' exempt traffic borrowed nearly every seat, the service accounts' level
// (kubelet plugins, daemons) was held to its minimum with requests queued and rejected, and the
// plugins' first watches timed out. Each kubelet process
// is its own user (one flow each, as distinct kubelets are), in one group bound to
// cluster-admin: the simulated kubelet does what a kubelet and its node authorizer allow, and
// more, but the sim is not about authorization; it is about being classified as kubelets are.
const (
	// KubeletGroup is the group of every simulated kubelet process.
	KubeletGroup = "cdplane:sim-kubelets"
	// KubeletFlowSchema and KubeletHighFlowSchema classify the group's requests as the
	// apiserver's system-nodes and system-node-high FlowSchemas classify a kubelet's.
	KubeletFlowSchema     = "cdplane-sim-kubelets"
	KubeletHighFlowSchema = "cdplane-sim-kubelets-high"
)

// KubeletUser is the user of the simulated-kubelet process serving shard.
func KubeletUser(shard int) string { return fmt.Sprintf("cdplane-sim-kubelet-%d", shard) }

// kubeletKubeconfig is where the kubeconfig of the simulated-kubelet process serving shard is.
func kubeletKubeconfig(stateDir string, shard int) string {
	return filepath.Join(stateDir, "pki", fmt.Sprintf("sim-kubelet-%d.kubeconfig", shard))
}

// setUpKubeletIdentity writes a kubeconfig per kubelet process and creates the group's binding
// and FlowSchemas (kept if they exist).
func setUpKubeletIdentity(ctx context.Context, stateDir string, st *State) error {
	for shard := range st.kubeletShards() {
		if err := st.ControlPlane.WriteUserKubeconfig(kubeletKubeconfig(stateDir, shard), KubeletUser(shard), KubeletGroup); err != nil {
			return err
		}
	}
	c, err := st.client()
	if err != nil {
		return err
	}
	objs := []client.Object{
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "cdplane-sim-kubelets"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: KubeletGroup}},
		},
		// As system-node-high: node and Lease writes, which keep nodes Ready.
		kubeletFlowSchema(KubeletHighFlowSchema, "node-high", 400, flowcontrolv1.PolicyRulesWithSubjects{
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{
				{Verbs: []string{"*"}, APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, ClusterScope: true},
				{Verbs: []string{"*"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Namespaces: []string{"*"}},
			},
		}),
		// As system-nodes: everything else a kubelet asks.
		kubeletFlowSchema(KubeletFlowSchema, "system", 500, flowcontrolv1.PolicyRulesWithSubjects{
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{
				{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"}},
			},
			NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
		}),
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s for the simulated kubelets: %w", o, o.GetName(), err)
		}
	}
	st.KubeletIdentity = true
	return st.save(stateDir)
}

// kubeletFlowSchema is a FlowSchema of the simulated kubelets' (KubeletGroup's) requests
// matching rules, at the priority level, one flow per user (per kubelet process).
func kubeletFlowSchema(name, level string, precedence int32, rules flowcontrolv1.PolicyRulesWithSubjects) *flowcontrolv1.FlowSchema {
	rules.Subjects = []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: KubeletGroup}}}
	return &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level},
			MatchingPrecedence:         precedence,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules:                      []flowcontrolv1.PolicyRulesWithSubjects{rules},
		},
	}
}

// kubeletKubeconfigFor is the kubeconfig the simulated-kubelet process serving shard uses: its
// own identity, or the administrator's in a sim started before kubelets had one.
func kubeletKubeconfigFor(st *State, stateDir string, shard int) string {
	if st.KubeletIdentity {
		return kubeletKubeconfig(stateDir, shard)
	}
	return st.ControlPlane.Kubeconfig
}
