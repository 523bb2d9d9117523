package sim

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
)

// Breakdown is where a job's time to Ready went, read from the timestamps the API holds: when
// each pod was created, scheduled, started, registered (daemons) and Ready, and when the
// domain's status turned Ready. The API's timestamps have a resolution of one second.
type Breakdown struct {
	// Steps are moments, each in seconds since the domain's creation over the pods it applies
	// to, in the order a job goes through them.
	Steps []BreakdownRow
	// Intervals are the per-pod (or per-domain) durations between two steps, each of them
	// spent in one component: the scheduler, the simulated kubelet (with cdplane's kubelet
	// plugin preparing claims), the daemon, IMEX and its probe, the controller.
	Intervals []BreakdownRow
}

// BreakdownRow is one line of a Breakdown: how many pods had the moment (or interval), and the
// median, 99th percentile and largest value in seconds.
type BreakdownRow struct {
	Name             string
	N                int
	Median, P99, Max float64
}

// Breakdown steps and intervals, by name.
const (
	StepWorkloadCreated   = "workload pods created"
	StepWorkloadScheduled = "workload pods scheduled"
	StepDaemonCreated     = "daemon pods created"
	StepDaemonScheduled   = "daemon pods scheduled"
	StepDaemonStarted     = "daemon containers started"
	StepDaemonRegistered  = "daemons registered (clique label)"
	StepDaemonReady       = "daemon pods Ready"
	StepDomainReady       = "domain Ready"
	StepWorkloadRunning   = "workload containers started"

	IntervalDaemonScheduling  = "daemon scheduling (created → scheduled)"
	IntervalDaemonStart       = "daemon pod start (scheduled → started)"
	IntervalDaemonRegister    = "daemon registration (started → label)"
	IntervalDaemonReady       = "IMEX ready + probe (label → Ready)"
	IntervalStatusWrites      = "cdplane status (last daemon Ready → domain Ready)"
	IntervalWorkloadScheduled = "workload scheduling (created → scheduled)"
	IntervalWorkloadStart     = "workload pod start (scheduled → started)"
	IntervalWorkloadAfterNode = "workload start after its node's daemon Ready"
)

// cliqueLabelField is how a write of the clique label appears in a pod's managed fields: the
// daemon's registration.
var cliqueLabelField = []byte(strconv.Quote("f:" + cdv1beta1.CliqueIDLabel))

// podTimes are the moments of one pod; zero when the API holds none (not yet).
type podTimes struct {
	node                                           string
	created, scheduled, started, registered, ready time.Time
	// daemonReady is when the daemon of the pod's node was Ready (workload pods).
	daemonReady time.Time
}

func timesOf(p *corev1.Pod) podTimes {
	t := podTimes{node: p.Spec.NodeName, created: p.CreationTimestamp.Time}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case corev1.PodScheduled:
			t.scheduled = c.LastTransitionTime.Time
		case corev1.PodReady:
			t.ready = c.LastTransitionTime.Time
		}
	}
	// Started: the first container running (or that ran) in the pod.
	for _, cs := range p.Status.ContainerStatuses {
		var at time.Time
		switch {
		case cs.State.Running != nil:
			at = cs.State.Running.StartedAt.Time
		case cs.State.Terminated != nil:
			at = cs.State.Terminated.StartedAt.Time
		}
		if !at.IsZero() && (t.started.IsZero() || at.Before(t.started)) {
			t.started = at
		}
	}
	for _, mf := range p.ManagedFields {
		if mf.Time != nil && mf.FieldsV1 != nil && bytes.Contains(mf.FieldsV1.GetRawBytes(), cliqueLabelField) {
			if t.registered.IsZero() || mf.Time.Time.Before(t.registered) {
				t.registered = mf.Time.Time
			}
		}
	}
	return t
}

// ComputeBreakdown computes where the time went from a domain, its daemon pods and the job's
// pods, as read from the API.
func ComputeBreakdown(cd *cdv1beta1.ComputeDomain, daemons, workloads []corev1.Pod) Breakdown {
	t0 := cd.CreationTimestamp.Time
	var domainReady time.Time
	if c := meta.FindStatusCondition(cd.Status.Conditions, cdv1beta1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
		domainReady = c.LastTransitionTime.Time
	}
	dt := make([]podTimes, len(daemons))
	for i := range daemons {
		dt[i] = timesOf(&daemons[i])
	}
	daemonReady := map[string]time.Time{}
	for _, p := range dt {
		if p.node != "" {
			daemonReady[p.node] = p.ready
		}
	}
	wt := make([]podTimes, len(workloads))
	for i := range workloads {
		wt[i] = timesOf(&workloads[i])
		wt[i].daemonReady = daemonReady[wt[i].node]
	}
	since := func(ts []podTimes, at func(podTimes) time.Time) []float64 {
		return durations(ts, func(p podTimes) (time.Time, time.Time) { return t0, at(p) })
	}
	between := func(ts []podTimes, from, to func(podTimes) time.Time) []float64 {
		return durations(ts, func(p podTimes) (time.Time, time.Time) { return from(p), to(p) })
	}
	created := func(p podTimes) time.Time { return p.created }
	scheduled := func(p podTimes) time.Time { return p.scheduled }
	started := func(p podTimes) time.Time { return p.started }
	registered := func(p podTimes) time.Time { return p.registered }
	ready := func(p podTimes) time.Time { return p.ready }
	atDomainReady := func(podTimes) time.Time { return domainReady }
	nodeDaemonReady := func(p podTimes) time.Time { return p.daemonReady }

	var b Breakdown
	b.Steps = []BreakdownRow{
		row(StepWorkloadCreated, since(wt, created)),
		row(StepWorkloadScheduled, since(wt, scheduled)),
		row(StepDaemonCreated, since(dt, created)),
		row(StepDaemonScheduled, since(dt, scheduled)),
		row(StepDaemonStarted, since(dt, started)),
		row(StepDaemonRegistered, since(dt, registered)),
		row(StepDaemonReady, since(dt, ready)),
		row(StepDomainReady, since([]podTimes{{}}, atDomainReady)),
		row(StepWorkloadRunning, since(wt, started)),
	}
	var lastDaemonReady time.Time
	for _, p := range dt {
		if p.ready.After(lastDaemonReady) {
			lastDaemonReady = p.ready
		}
	}
	b.Intervals = []BreakdownRow{
		row(IntervalWorkloadScheduled, between(wt, created, scheduled)),
		row(IntervalDaemonScheduling, between(dt, created, scheduled)),
		row(IntervalDaemonStart, between(dt, scheduled, started)),
		row(IntervalDaemonRegister, between(dt, started, registered)),
		row(IntervalDaemonReady, between(dt, registered, ready)),
		row(IntervalStatusWrites, between([]podTimes{{}}, func(podTimes) time.Time { return lastDaemonReady }, atDomainReady)),
		row(IntervalWorkloadStart, between(wt, scheduled, started)),
		row(IntervalWorkloadAfterNode, between(wt, nodeDaemonReady, started)),
	}
	return b
}

// durations are to−from in seconds for the pods that have both moments.
func durations(ts []podTimes, span func(podTimes) (from, to time.Time)) []float64 {
	var out []float64
	for _, p := range ts {
		from, to := span(p)
		if from.IsZero() || to.IsZero() {
			continue
		}
		out = append(out, to.Sub(from).Seconds())
	}
	return out
}

// row summarises values (nearest-rank percentiles).
func row(name string, values []float64) BreakdownRow {
	r := BreakdownRow{Name: name, N: len(values)}
	if len(values) == 0 {
		return r
	}
	v := slices.Clone(values)
	slices.Sort(v)
	rank := func(q float64) float64 { return v[max(int(math.Ceil(q*float64(len(v))))-1, 0)] }
	r.Median, r.P99, r.Max = rank(0.5), rank(0.99), v[len(v)-1]
	return r
}

// Write prints the breakdown as two short tables.
func (b Breakdown) Write(w io.Writer) {
	table := func(title string, rows []BreakdownRow) {
		fmt.Fprintf(w, "%s\n  %-50s %6s %7s %7s %7s\n", title, "", "N", "MEDIAN", "P99", "MAX")
		for _, r := range rows {
			if r.N == 0 {
				fmt.Fprintf(w, "  %-50s %6d %7s %7s %7s\n", r.Name, 0, "-", "-", "-")
				continue
			}
			fmt.Fprintf(w, "  %-50s %6d %6.0fs %6.0fs %6.0fs\n", r.Name, r.N, r.Median, r.P99, r.Max)
		}
	}
	table("Where the time went, from the API's timestamps (1 s resolution), seconds since the domain was created:", b.Steps)
	table("Per pod, seconds between two steps:", b.Intervals)
}
