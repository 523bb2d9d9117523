package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

func TestSummarizeOrdersPhasesAndCountsRetries(t *testing.T) {
	mk := func(failed int, at map[string]time.Duration) *trace {
		return &trace{at: at, failed: failed}
	}
	traces := []*trace{
		mk(0, map[string]time.Duration{phaseJoined: 4 * time.Second, phaseLabel: time.Second}),
		mk(2, map[string]time.Duration{phaseJoined: 6 * time.Second, phaseLabel: 3 * time.Second}),
		nil, // an instance that had not started
		mk(0, map[string]time.Duration{phaseLabel: 2 * time.Second}),
	}
	phases, retrying := summarize(traces)
	if retrying != 1 {
		t.Errorf("instances retrying: %d, want 1", retrying)
	}
	if len(phases) != 2 || phases[0].Name != phaseLabel || phases[1].Name != phaseJoined {
		t.Fatalf("phases out of order or missing: %+v", phases)
	}
	if l := phases[0]; l.Reached != 3 || l.P50Ms != 2000 || l.MaxMs != 3000 {
		t.Errorf("label: %+v, want 3 reached, p50 2000, max 3000", l)
	}
	if j := phases[1]; j.Reached != 2 || j.P50Ms != 4000 || j.P99Ms != 6000 {
		t.Errorf("pod_ready: %+v, want 2 reached, p50 4000, p99 6000", j)
	}
}

func TestTraceKeepsFirstSuccessAndCountsFailures(t *testing.T) {
	tr := newTrace()
	tr.record(phaseLabel, errors.New("429"))
	if _, ok := tr.at[phaseLabel]; ok || tr.failed != 1 {
		t.Fatalf("a failed call marked its phase: %+v", tr)
	}
	tr.record(phaseLabel, nil)
	first := tr.at[phaseLabel]
	tr.start = tr.start.Add(-time.Second) // a later success is a second further from the start
	tr.record(phaseLabel, nil)
	if tr.at[phaseLabel] != first {
		t.Errorf("a later success moved the phase from %v to %v", first, tr.at[phaseLabel])
	}
}

// stubWatcher serves a clique list and a watch the test drives; nothing else is called.
type stubWatcher struct {
	client.WithWatch
	items []cdv1beta1.ComputeDomainClique
	w     *watch.FakeWatcher
}

func (s stubWatcher) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*cdv1beta1.ComputeDomainCliqueList).Items = s.items
	return nil
}

func (s stubWatcher) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return s.w, nil
}

func TestTracedClientMarksInCliqueWhenTheCliqueNamesItsNode(t *testing.T) {
	clique := func(nodes ...string) *cdv1beta1.ComputeDomainClique {
		cl := &cdv1beta1.ComputeDomainClique{}
		for _, n := range nodes {
			cl.Daemons = append(cl.Daemons, cdv1beta1.ComputeDomainDaemonInfo{NodeName: n})
		}
		return cl
	}
	t.Run("list", func(t *testing.T) {
		tr := newTrace()
		c := tracedClient{WithWatch: stubWatcher{items: []cdv1beta1.ComputeDomainClique{*clique("n1", "n2")}}, t: tr, node: "n3"}
		must(t, c.List(context.Background(), &cdv1beta1.ComputeDomainCliqueList{}))
		if _, ok := tr.at[phaseClique]; ok {
			t.Fatalf("in_clique marked for a clique without the node")
		}
		c.WithWatch = stubWatcher{items: []cdv1beta1.ComputeDomainClique{*clique("n1", "n3")}}
		must(t, c.List(context.Background(), &cdv1beta1.ComputeDomainCliqueList{}))
		if _, ok := tr.at[phaseList]; !ok {
			t.Errorf("list not marked")
		}
		if _, ok := tr.at[phaseClique]; !ok {
			t.Errorf("in_clique not marked for a listed clique naming the node")
		}
	})
	t.Run("watch", func(t *testing.T) {
		tr := newTrace()
		fw := watch.NewFake()
		c := tracedClient{WithWatch: stubWatcher{w: fw}, t: tr, node: "n3"}
		w, err := c.Watch(context.Background(), &cdv1beta1.ComputeDomainCliqueList{})
		must(t, err)
		defer w.Stop()
		next := func() {
			t.Helper()
			select {
			case <-w.ResultChan():
			case <-time.After(time.Minute):
				t.Fatal("the event was not passed on")
			}
		}
		go fw.Add(clique("n1"))
		next()
		go fw.Delete(clique("n3")) // a deleted clique does not count
		next()
		if _, ok := tr.at[phaseClique]; ok {
			t.Fatalf("in_clique marked before an event listed the node")
		}
		go fw.Modify(clique("n1", "n3"))
		next()
		if _, ok := tr.at[phaseClique]; !ok {
			t.Errorf("in_clique not marked when the watched clique came to name the node")
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestPodsSeenMarksTheFirstLabelledAndReadyPodOfEachInstance(t *testing.T) {
	pod := func(name string, labelled, ready bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if labelled {
			p.Labels = map[string]string{cdv1beta1.CliqueIDLabel: "c"}
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: st}}
		return p
	}
	w := &world{pods: []*corev1.Pod{pod("d0", false, false), pod("d1", false, false), pod("d2", false, false)}}
	for i, p := range w.pods {
		p.Spec.NodeName = fmt.Sprintf("node-%d", i)
	}
	// The controller's sightings travel from its process as a report and are merged here.
	s := newPodsSeen()
	traces := []*trace{newTrace(), newTrace(), nil}
	s.observe(pod("d0", false, false)) // neither labelled nor Ready yet
	s.observe(pod("d1", true, false))
	s.observe(pod("other", true, true)) // not an instance's pod
	s.observe(pod("d2", true, true))    // an instance not started: no trace
	// A later update does not move the first sighting (set an hour back, so that any new
	// reading of the clock would differ from it); the pod's first Ready is recorded.
	first := s.at[phaseSeen]["d1"].Add(-time.Hour)
	s.at[phaseSeen]["d1"] = first
	s.observe(pod("d1", true, true))
	if s.at[phaseSeen]["d1"] != first {
		t.Errorf("a later update moved the first sighting")
	}
	// A clique written naming d1's node (by node name, not pod name), and one naming a node
	// with no instance.
	s.written(&cdv1beta1.ComputeDomainClique{Daemons: []cdv1beta1.ComputeDomainDaemonInfo{{NodeName: "node-1"}, {NodeName: "node-9"}}})
	merged := newPodsSeen()
	merged.merge(s.byName())
	merged.markInto(traces, w)
	if _, ok := traces[0].at[phaseWritten]; ok {
		t.Errorf("written marked for a node no clique named")
	}
	if d, want := traces[1].at[phaseWritten], s.at[phaseWritten]["node-1"].Round(0).Sub(traces[1].start.Round(0)); d != want {
		t.Errorf("written for d1's node: %v; want %v", d, want)
	}
	if _, ok := traces[0].at[phaseSeen]; ok {
		t.Errorf("seen marked for a pod never labelled")
	}
	if _, ok := traces[0].at[phaseReadySeen]; ok {
		t.Errorf("ready_seen marked for a pod never Ready")
	}
	// Across processes only the wall clock means anything: compare wall clock readings.
	if d, want := traces[1].at[phaseSeen], first.Round(0).Sub(traces[1].start.Round(0)); d != want {
		t.Errorf("seen for d1: %v; want %v", d, want)
	}
	if d, ok := traces[1].at[phaseReadySeen]; !ok || d < traces[1].at[phaseSeen] {
		t.Errorf("ready_seen for d1: %v, %v; want it marked, after seen", d, ok)
	}
	// An earlier sighting merged in wins; a later one does not.
	merged.merge(map[string]map[string]int64{phaseSeen: {"d1": first.Add(-time.Minute).UnixNano(), "d2": time.Now().Add(time.Hour).UnixNano()}})
	if got := merged.at[phaseSeen]["d1"]; !got.Equal(first.Add(-time.Minute)) {
		t.Errorf("an earlier sighting merged in: d1 seen at %v, want %v", got, first.Add(-time.Minute))
	}
	if got := merged.at[phaseSeen]["d2"]; got.After(time.Now()) {
		t.Errorf("a later sighting merged in replaced the first: %v", got)
	}
	(*podsSeen)(nil).markInto(traces, w) // modes without the controller
}

func TestRegistrationOptionsNameTheBadOne(t *testing.T) {
	valid := func() Options {
		return Options{Nodes: 4, CliqueSize: 2, Arrival: "burst", Modes: []string{ModeCdplane}}
	}
	cases := map[string]struct {
		change  func(*Options)
		wantErr string
	}{
		"defaults":                {change: func(*Options) {}},
		"a batch window":          {change: func(o *Options) { o.BatchWindow = time.Second }},
		"a negative batch window": {change: func(o *Options) { o.BatchWindow = -time.Second }, wantErr: "--batch-window must not be negative, got -1s"},
		"an unknown mode":         {change: func(o *Options) { o.Modes = []string{"fast"} }, wantErr: `unknown mode "fast"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := valid()
			tc.change(&o)
			err := o.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
