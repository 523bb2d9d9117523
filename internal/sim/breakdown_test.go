package sim

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

var t0 = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }

// stampedPod is a pod on node created at created whose moments are seconds after t0 (negative: the
// API holds none): scheduled, first container started, clique label written, Ready.
func stampedPod(name, node string, created, scheduled, started, registered, ready int) corev1.Pod {
	p := testutil.MakePod(name, "ns").NodeName(node).Created(at(created).Time).Obj()
	if scheduled >= 0 {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(scheduled)})
	}
	if ready >= 0 {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at(ready)})
	} else {
		// A condition that is not True is no moment.
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: at(1)})
	}
	if started >= 0 {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{
			{Name: "later", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(started + 5)}}},
			{Name: "first", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: at(started)}}},
		}
	}
	// The kubelet's status writes do not count; the write of the clique label does.
	p.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: ptrTime(at(max(started, 0) + 1)),
		FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{}}}`),
	}}
	if registered >= 0 {
		p.ManagedFields = append(p.ManagedFields, metav1.ManagedFieldsEntry{
			Manager: "cdplane-daemon", Operation: metav1.ManagedFieldsOperationUpdate, Time: ptrTime(at(registered)),
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:` + cdv1beta1.CliqueIDLabel + `":{}}}}`),
		})
	}
	return *p
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }

func readyDomain(readyAt int) *cdv1beta1.ComputeDomain {
	cd := testutil.MakeComputeDomain("job").Namespace("ns").NumNodes(2).Obj()
	cd.CreationTimestamp = at(0)
	if readyAt >= 0 {
		cd.Status.Conditions = []metav1.Condition{{Type: cdv1beta1.ConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: at(readyAt)}}
	} else {
		cd.Status.Conditions = []metav1.Condition{{Type: cdv1beta1.ConditionReady, Status: metav1.ConditionFalse, LastTransitionTime: at(0)}}
	}
	return cd
}

func TestComputeBreakdown(t *testing.T) {
	cases := map[string]struct {
		cd                 *cdv1beta1.ComputeDomain
		daemons, workloads []corev1.Pod
		want               Breakdown
	}{
		"two nodes: every step from the timestamps, intervals per pod": {
			cd: readyDomain(40),
			daemons: []corev1.Pod{
				stampedPod("d0", "n0", 5, 6, 10, 12, 30),
				stampedPod("d1", "n1", 7, 9, 15, 20, 36),
			},
			workloads: []corev1.Pod{
				stampedPod("w0", "n0", 1, 2, 42, -1, 43),
				stampedPod("w1", "n1", 1, 3, 45, -1, 45),
			},
			want: Breakdown{
				Steps: []BreakdownRow{
					{Name: StepWorkloadCreated, N: 2, Median: 1, P99: 1, Max: 1},
					{Name: StepWorkloadScheduled, N: 2, Median: 2, P99: 3, Max: 3},
					{Name: StepDaemonCreated, N: 2, Median: 5, P99: 7, Max: 7},
					{Name: StepDaemonScheduled, N: 2, Median: 6, P99: 9, Max: 9},
					{Name: StepDaemonStarted, N: 2, Median: 10, P99: 15, Max: 15},
					{Name: StepDaemonRegistered, N: 2, Median: 12, P99: 20, Max: 20},
					{Name: StepDaemonReady, N: 2, Median: 30, P99: 36, Max: 36},
					{Name: StepDomainReady, N: 1, Median: 40, P99: 40, Max: 40},
					{Name: StepWorkloadRunning, N: 2, Median: 42, P99: 45, Max: 45},
				},
				Intervals: []BreakdownRow{
					{Name: IntervalWorkloadScheduled, N: 2, Median: 1, P99: 2, Max: 2},
					{Name: IntervalDaemonScheduling, N: 2, Median: 1, P99: 2, Max: 2},
					{Name: IntervalDaemonStart, N: 2, Median: 4, P99: 6, Max: 6},
					{Name: IntervalDaemonRegister, N: 2, Median: 2, P99: 5, Max: 5},
					{Name: IntervalDaemonReady, N: 2, Median: 16, P99: 18, Max: 18},
					{Name: IntervalStatusWrites, N: 1, Median: 4, P99: 4, Max: 4},
					{Name: IntervalWorkloadStart, N: 2, Median: 40, P99: 42, Max: 42},
					{Name: IntervalWorkloadAfterNode, N: 2, Median: 9, P99: 12, Max: 12},
				},
			},
		},
		"stalled: moments not reached yet are not counted": {
			cd: readyDomain(-1),
			daemons: []corev1.Pod{
				stampedPod("d0", "n0", 5, 6, 10, 12, -1),
				stampedPod("d1", "n1", 7, -1, -1, -1, -1),
			},
			workloads: []corev1.Pod{stampedPod("w0", "n0", 1, 2, -1, -1, -1)},
			want: Breakdown{
				Steps: []BreakdownRow{
					{Name: StepWorkloadCreated, N: 1, Median: 1, P99: 1, Max: 1},
					{Name: StepWorkloadScheduled, N: 1, Median: 2, P99: 2, Max: 2},
					{Name: StepDaemonCreated, N: 2, Median: 5, P99: 7, Max: 7},
					{Name: StepDaemonScheduled, N: 1, Median: 6, P99: 6, Max: 6},
					{Name: StepDaemonStarted, N: 1, Median: 10, P99: 10, Max: 10},
					{Name: StepDaemonRegistered, N: 1, Median: 12, P99: 12, Max: 12},
					{Name: StepDaemonReady},
					{Name: StepDomainReady},
					{Name: StepWorkloadRunning},
				},
				Intervals: []BreakdownRow{
					{Name: IntervalWorkloadScheduled, N: 1, Median: 1, P99: 1, Max: 1},
					{Name: IntervalDaemonScheduling, N: 1, Median: 1, P99: 1, Max: 1},
					{Name: IntervalDaemonStart, N: 1, Median: 4, P99: 4, Max: 4},
					{Name: IntervalDaemonRegister, N: 1, Median: 2, P99: 2, Max: 2},
					{Name: IntervalDaemonReady},
					{Name: IntervalStatusWrites},
					{Name: IntervalWorkloadStart},
					{Name: IntervalWorkloadAfterNode},
				},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ComputeBreakdown(tc.cd, tc.daemons, tc.workloads)); diff != "" {
				t.Errorf("breakdown (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBreakdownRowPercentiles(t *testing.T) {
	cases := map[string]struct {
		values []float64
		want   BreakdownRow
	}{
		"none":                {want: BreakdownRow{Name: "x"}},
		"one":                 {values: []float64{3}, want: BreakdownRow{Name: "x", N: 1, Median: 3, P99: 3, Max: 3}},
		"nearest rank of 100": {values: hundred(), want: BreakdownRow{Name: "x", N: 100, Median: 50, P99: 99, Max: 100}},
		"unsorted input":      {values: []float64{9, 1, 5}, want: BreakdownRow{Name: "x", N: 3, Median: 5, P99: 9, Max: 9}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, row("x", tc.values)); diff != "" {
				t.Errorf("row (-want +got):\n%s", diff)
			}
		})
	}
}

func hundred() []float64 {
	v := make([]float64, 100)
	for i := range v {
		v[len(v)-1-i] = float64(i + 1)
	}
	return v
}

func TestBreakdownWrite(t *testing.T) {
	b := Breakdown{
		Steps:     []BreakdownRow{{Name: StepDomainReady, N: 1, Median: 270, P99: 270, Max: 270}, {Name: StepWorkloadRunning}},
		Intervals: []BreakdownRow{{Name: IntervalStatusWrites, N: 1, Median: 2, P99: 2, Max: 2}},
	}
	var out bytes.Buffer
	b.Write(&out)
	for _, want := range []string{
		"domain Ready                                            1    270s    270s    270s",
		"workload containers started                             0       -       -       -",
		"cdplane status (last daemon Ready → domain Ready)       1      2s      2s      2s",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
