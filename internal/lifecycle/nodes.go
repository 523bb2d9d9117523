package lifecycle

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/scheme"
)

// The record of node assignments: a ConfigMap in kube-system, where only cluster
// administrators write, mapping each assigned node's name to its plane's id. A Node object,
// and with it the plane label, goes when the node is deleted; a kubelet that registers it
// again cannot set the label (the ownership policy refuses it), so without a record the node
// would silently fall to the legacy plane. `cdplane assign node --check` compares the record
// with the nodes.
const (
	NodeAssignmentsNamespace = PrerequisitesNamespace
	NodeAssignmentsName      = "cdplane-node-assignments"
)

func nodeRecordKey() client.ObjectKey {
	return client.ObjectKey{Namespace: NodeAssignmentsNamespace, Name: NodeAssignmentsName}
}

func describeNodeRecord() string {
	return "ConfigMap " + NodeAssignmentsNamespace + "/" + NodeAssignmentsName
}

// readNodeRecord returns the record (nil when there is none).
func readNodeRecord(ctx context.Context, c client.Reader) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, nodeRecordKey(), cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the node assignments (%s): %w", describeNodeRecord(), err)
	}
	return cm, nil
}

// NodeAssignments returns the recorded assignments, node name → plane id.
func NodeAssignments(ctx context.Context, c client.Reader) (map[string]string, error) {
	cm, err := readNodeRecord(ctx, c)
	if err != nil || cm == nil {
		return map[string]string{}, err
	}
	return cm.Data, nil
}

// updateNodeRecord applies change to the record's data (node → id) and writes it when change
// says it changed something, with the resourceVersion of the read (a concurrent writer makes it
// read again). An emptied record is deleted.
func updateNodeRecord(ctx context.Context, c client.Client, change func(data map[string]string) bool) error {
	return retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
	}, func() error {
		cm, err := readNodeRecord(ctx, c)
		if err != nil {
			return err
		}
		if cm == nil {
			data := map[string]string{}
			if !change(data) || len(data) == 0 {
				return nil
			}
			cm = &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: NodeAssignmentsNamespace, Name: NodeAssignmentsName,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "cdplane", partOfLabel: partOfValue},
				},
				Data: data,
			}
			return c.Create(ctx, cm)
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if !change(cm.Data) {
			return nil
		}
		if len(cm.Data) == 0 {
			return deleteExact(ctx, c, cm)
		}
		return c.Update(ctx, cm)
	})
}

// recordNode records that node is assigned to plane id, adding a line to res when the record
// changed.
func recordNode(ctx context.Context, c client.Client, id, node string, res *Result) error {
	was := ""
	err := updateNodeRecord(ctx, c, func(data map[string]string) bool {
		was = data[node]
		data[node] = id
		return was != id
	})
	switch {
	case err != nil:
		return err
	case was == "":
		res.add("assignment of node %s recorded in %s", node, describeNodeRecord())
	case was != id:
		res.add("assignment of node %s recorded in %s (it was control plane %q's)", node, describeNodeRecord(), was)
	}
	return nil
}

// forgetNodes removes from the record the nodes of plane id that match, adding a line to res
// for each.
func forgetNodes(ctx context.Context, c client.Client, id string, match func(node string) bool, res *Result) error {
	var gone []string
	err := updateNodeRecord(ctx, c, func(data map[string]string) bool {
		gone = nil
		for node, v := range data {
			if v == id && match(node) {
				delete(data, node)
				gone = append(gone, node)
			}
		}
		return len(gone) > 0
	})
	if err != nil {
		return err
	}
	sort.Strings(gone)
	for _, node := range gone {
		res.add("assignment of node %s removed from %s", node, describeNodeRecord())
	}
	return nil
}

// NodeFinding is a recorded node assignment that does not hold.
type NodeFinding struct {
	Node, ID string
	// Absent: the node does not exist (it may register again); not an error by itself.
	Absent bool
	// Message says what is wrong and the command that repairs it.
	Message string
}

// CheckNodeAssignments compares the recorded assignments (node → id) with the nodes as they
// are (name → their plane label, "" for none; a node missing from the map does not exist),
// for plane id (every plane when id is empty). It returns, sorted by node, the recorded nodes
// that exist without their plane's label (re-registered, or the label removed by hand), those
// labelled for another plane, those that do not exist, and the nodes labelled for the plane
// that the record lacks; and how many recorded nodes hold.
func CheckNodeAssignments(id string, record, nodes map[string]string) (findings []NodeFinding, holding int) {
	for node, want := range record {
		if id != "" && want != id {
			continue
		}
		label, exists := nodes[node]
		switch {
		case !exists:
			findings = append(findings, NodeFinding{Node: node, ID: want, Absent: true, Message: fmt.Sprintf(
				"node %s was assigned to control plane %q and does not exist: if it registers again, run cdplane assign node %s --control-plane-id %s; to forget it, cdplane unassign node %s --control-plane-id %s",
				node, want, node, want, node, want)})
		case label == "":
			findings = append(findings, NodeFinding{Node: node, ID: want, Message: fmt.Sprintf(
				"node %s was assigned to control plane %q but its label is gone (re-registered?): run cdplane assign node %s --control-plane-id %s (or, to forget it, cdplane unassign node %s --control-plane-id %s)",
				node, want, node, want, node, want)})
		case label != want:
			findings = append(findings, NodeFinding{Node: node, ID: want, Message: fmt.Sprintf(
				"node %s was assigned to control plane %q but is labelled for control plane %q: unassign it from one of them (cdplane unassign node %s --control-plane-id ...)",
				node, want, label, node)})
		default:
			holding++
		}
	}
	for node, label := range nodes {
		if label == "" || (id != "" && label != id) {
			continue
		}
		if _, ok := record[node]; !ok {
			findings = append(findings, NodeFinding{Node: node, ID: label, Message: fmt.Sprintf(
				"node %s carries control plane %q's label but its assignment is not recorded in %s (a re-registration would lose it): run cdplane assign node %s --control-plane-id %s",
				node, label, describeNodeRecord(), node, label)})
		}
	}
	sort.Slice(findings, func(i, j int) bool { return findings[i].Node < findings[j].Node })
	return findings, holding
}

// NodeAssignmentReport reads the record and the nodes and checks them (CheckNodeAssignments)
// for plane id, every plane when id is empty.
func NodeAssignmentReport(ctx context.Context, c client.Reader, id string) (findings []NodeFinding, holding int, err error) {
	record, err := NodeAssignments(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	list := scheme.MetaList(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := c.List(ctx, list); err != nil {
		return nil, 0, fmt.Errorf("listing the nodes: %w", err)
	}
	nodes := make(map[string]string, len(list.Items))
	for _, n := range list.Items {
		nodes[n.Name] = n.Labels[cdv1beta1.ControlPlaneLabel]
	}
	findings, holding = CheckNodeAssignments(id, record, nodes)
	return findings, holding, nil
}
