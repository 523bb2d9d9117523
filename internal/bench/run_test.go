package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/sets"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"cdplane/internal/metrics"
	"cdplane/internal/sim/controlplane"
)

// TestRegistrationOnAControlPlane runs the registration benchmark small (36 daemons, cdplane and
// peer-cliques) on a real etcd and kube-apiserver, and checks the figures it reports come from
// what happened: every daemon joined, cdplane with one write per daemon and no conflict, the
// controller reconciled, the apiserver's counters saw the pod writes and the clique watch
// events, and the join curve rises to 36. It needs the binaries of hack/k8s-bins.sh in
// $CDPLANE_K8S_BINS.
func TestRegistrationOnAControlPlane(t *testing.T) {
	binDir := controlPlaneBins(t)
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	// A fresh control plane for the floor and each mode, as the command starts them.
	var hosts []string
	fresh := func(ctx context.Context) (Cluster, error) {
		cp, err := controlplane.Start(ctx, controlplane.Options{Dir: t.TempDir(), BinDir: binDir, InstallCRDs: true,
			APIServerArgs: map[string][]string{"authorization-mode": {"RBAC"}}})
		if err != nil {
			return Cluster{}, err
		}
		stop := func() {
			if err := cp.Stop(15 * time.Second); err != nil {
				t.Errorf("stopping the control plane: %v", err)
			}
		}
		cfg, err := cp.AdminConfig()
		if err != nil {
			stop()
			return Cluster{}, err
		}
		// Identified by address and CA: a fresh plane may reuse a stopped one's port.
		hosts = append(hosts, clusterKey(cfg))
		cl, err := ControlPlaneCluster(cp, cfg, stop)
		if err != nil {
			stop()
		}
		return cl, err
	}
	const n = 36
	profiles := t.TempDir()
	// The controller in a process of its own, as the command runs it (this test binary; see
	// TestMain).
	rep, err := Run(ctx, nil, Options{Nodes: n, CliqueSize: 18, Arrival: "burst", Modes: []string{ModeCdplane, ModePeerCliques},
		Runs: 2, Timeout: 3 * time.Minute, ProfileDir: profiles, ProfileSeconds: 1, FreshCluster: fresh,
		ControllerCommand: []string{os.Args[0], controllerChildArg}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FloorSeconds <= 0 || rep.Floor.Joined[len(rep.Floor.Joined)-1].Count != n {
		t.Errorf("floor: %.2fs, joined %+v", rep.FloorSeconds, rep.Floor.Joined)
	}
	cd, ok := rep.Modes[ModeCdplane]
	if !ok || cd.TimedOut {
		t.Fatalf("cdplane did not finish: %+v", cd)
	}
	if cd.WritesPerDaemon != 1 || cd.Conflicts != 0 {
		t.Errorf("cdplane: %.2f writes per daemon, %v conflicts; want 1 and 0", cd.WritesPerDaemon, cd.Conflicts)
	}
	if cd.Reconciles < 1 || cd.ReconcileSeconds <= 0 || cd.ControllerWrites < 2 {
		t.Errorf("cdplane: %v reconciles in %vs, %d controller writes", cd.Reconciles, cd.ReconcileSeconds, cd.ControllerWrites)
	}
	for _, step := range []string{metrics.ReconcileStepResources, metrics.ReconcileStepMembership, metrics.ReconcileStepCliques, metrics.ReconcileStepStatus} {
		if cd.ReconcileSteps[step] <= 0 {
			t.Errorf("cdplane: no time for the reconcile step %s: %v", step, cd.ReconcileSteps)
		}
	}
	if cd.Requests["PATCH pods"] < n || cd.Requests["PATCH pods/status"] < 2*n || cd.WatchEvents["computedomaincliques"] < n {
		t.Errorf("cdplane: the apiserver's counters miss the registration: requests %v, watch events %v", cd.Requests, cd.WatchEvents)
	}
	// Request times by the same keys as the counts, without watches; queue waits by level.
	if cd.RequestMs["APPLY computedomaincliques"] <= 0 || cd.RequestMs["PATCH pods"] <= 0 || cd.RequestMs["WATCH computedomaincliques"] != 0 || len(cd.QueuedMs) == 0 {
		t.Errorf("cdplane: the apiserver's request times miss the registration: %v, queued %v", cd.RequestMs, cd.QueuedMs)
	}
	last := 0
	for _, s := range cd.Joined {
		if s.Count < last || s.Seconds < 0 || s.Seconds > cd.Seconds+1 {
			t.Errorf("cdplane join curve not a rising count over the run: %+v", cd.Joined)
			break
		}
		last = s.Count
	}
	if last != n {
		t.Errorf("cdplane join curve ends at %d, want %d", last, n)
	}
	if pc := rep.Modes[ModePeerCliques]; pc.TimedOut || pc.WritesPerDaemon < 2 || pc.Joined[len(pc.Joined)-1].Count != n {
		t.Errorf("peer-cliques: %+v", pc)
	}
	for _, f := range []string{"floor.bench.pprof", "floor.apiserver.pprof", "cdplane.bench.pprof", "cdplane.apiserver.pprof", "cdplane.controller.pprof",
		"cdplane-run2.bench.pprof", "cdplane-run2.controller.pprof"} {
		if st, err := os.Stat(filepath.Join(profiles, f)); err != nil || st.Size() == 0 {
			t.Errorf("profile %s not written: %v", f, err)
		}
	}
	if s := joinedModes(rep); s != "cdplane,peer-cliques" {
		t.Errorf("modes reported: %s", s)
	}
	if len(hosts) != 6 || len(sets.New(hosts...)) != 6 {
		t.Errorf("the floor and the two modes of two runs ran on control planes %v, want six fresh ones", hosts)
	}
	checkRunsAndCosts(t, rep, n)
	// Every daemon went through every step of the registration, in order, and each step is
	// traced where it happened.
	for name, r := range map[string]Result{"floor": rep.Floor, ModeCdplane: cd} {
		if r.JoinedAtEnd != n || r.StoppedBy != "" || r.PeakRSSBytes == 0 {
			t.Errorf("%s: joined %d, stopped by %q, peak RSS %d", name, r.JoinedAtEnd, r.StoppedBy, r.PeakRSSBytes)
		}
		reached := map[string]Phase{}
		for _, p := range r.Phases {
			reached[p.Name] = p
		}
		prev := 0.0
		for _, want := range []string{phaseRunning, phaseLabel, phaseReady, phaseJoined} {
			p, ok := reached[want]
			if !ok || p.Reached != n || p.P50Ms < prev || p.MaxMs < p.P99Ms {
				t.Errorf("%s: phase %s: %+v (phases %+v)", name, want, p, r.Phases)
			}
			prev = p.P50Ms
		}
		if reached[phaseWatch].Reached != n {
			t.Errorf("%s: %d daemons opened their watch, want %d", name, reached[phaseWatch].Reached, n)
		}
	}
	// The controller process's sightings of the pods came back into the daemons' traces.
	for _, ph := range []string{phaseSeen, phaseWritten, phaseReadySeen} {
		if got := phaseOf(cd, ph); got.Reached != n {
			t.Errorf("cdplane: %d daemons reached %s, want %d (phases %+v)", got.Reached, ph, n, cd.Phases)
		}
	}

	// A mode that passes the memory limit stops, and says so with how many had joined. This
	// run is on one given cluster (--kubeconfig), every mode on it in turn.
	given, err := fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer given.Stop()
	small, err := Run(ctx, given.Config, Options{Nodes: n, CliqueSize: 18, Arrival: "burst", Modes: []string{ModeCdplane},
		Timeout: 3 * time.Minute, MaxRSSGiB: 1.0 / 1024})
	if err != nil {
		t.Fatal(err)
	}
	// On a given cluster etcd is out of reach: its figures are absent, not zero.
	if _, ok := small.Modes[ModeCdplane].Cost[CostEtcdCPU]; small.EtcdMeasured || small.Floor.EtcdCPUSeconds != nil || small.Floor.EtcdWALBytes != nil || ok {
		t.Errorf("etcd figures on a given cluster: measured %v, floor %v %v", small.EtcdMeasured, small.Floor.EtcdCPUSeconds, small.Floor.EtcdWALBytes)
	}
	if small.Floor.APIServerCPUSeconds == nil {
		t.Errorf("no kube-apiserver CPU on a given cluster")
	}
	for name, r := range map[string]Result{"floor": small.Floor, ModeCdplane: small.Modes[ModeCdplane]} {
		if r.StoppedBy != "memory" || !r.TimedOut || r.JoinedAtEnd >= n {
			t.Errorf("%s with a 1 MiB limit: stopped by %q, timed out %v, joined %d", name, r.StoppedBy, r.TimedOut, r.JoinedAtEnd)
		}
	}
}

// checkRunsAndCosts checks a report of two runs of the floor, cdplane and peer-cliques on
// control planes the benchmark started: every run is in it, with every cost figure measured
// and positive, the ratios to the floor where the floor has the figure, and the summary over
// both runs.
func checkRunsAndCosts(t *testing.T, rep *Report, n int) {
	t.Helper()
	if len(rep.Runs) != 2 || rep.Runs[0].FloorSeconds != rep.FloorSeconds || rep.Runs[0].Modes[ModeCdplane].Seconds != rep.Modes[ModeCdplane].Seconds {
		t.Fatalf("%d runs; the report's own floor and modes must be the first run's", len(rep.Runs))
	}
	if !rep.EtcdMeasured {
		t.Errorf("etcd not measured on control planes the benchmark started")
	}
	positive := func(what string, p *float64) {
		if p == nil || *p <= 0 {
			t.Errorf("%s: %v, want a positive figure", what, p)
		}
	}
	for i, run := range rep.Runs {
		for name, r := range map[string]Result{"floor": run.Floor, ModeCdplane: run.Modes[ModeCdplane], ModePeerCliques: run.Modes[ModePeerCliques]} {
			what := fmt.Sprintf("run %d, %s", i+1, name)
			positive(what+": apiserver CPU", r.APIServerCPUSeconds)
			positive(what+": etcd CPU", r.EtcdCPUSeconds)
			positive(what+": etcd WAL bytes", r.EtcdWALBytes)
			if r.JoinedAtEnd != n {
				t.Errorf("%s: %d joined", what, r.JoinedAtEnd)
			}
		}
		// Only cdplane's daemons watch cliques: the floor makes none, peer-cliques' daemons
		// read theirs.
		for name, r := range map[string]Result{"floor": run.Floor, ModePeerCliques: run.Modes[ModePeerCliques]} {
			if r.CliqueWatchBytesLeast != 0 || r.CliqueWatchBytesOverLeast != nil {
				t.Errorf("run %d, %s: clique least %v", i+1, name, r.CliqueWatchBytesLeast)
			}
		}
		if r := run.Modes[ModeCdplane]; r.CliqueWatchBytesLeast <= 0 {
			t.Errorf("run %d, cdplane: clique least %v", i+1, r.CliqueWatchBytesLeast)
		}
		positive(fmt.Sprintf("run %d, cdplane: clique watch bytes over least", i+1), run.Modes[ModeCdplane].CliqueWatchBytesOverLeast)
		// The last hop is cdplane's (the domain's status turning Ready), not the floor's.
		if r := run.Modes[ModeCdplane]; r.LastHopMs == nil || r.LastHopFromSeenMs == nil {
			t.Errorf("run %d, cdplane: no last hop (%v, %v)", i+1, r.LastHopMs, r.LastHopFromSeenMs)
		}
		if run.Floor.LastHopMs != nil {
			t.Errorf("run %d: the floor has a last hop", i+1)
		}
		for _, m := range []string{ModeCdplane, ModePeerCliques} {
			r := run.Modes[m]
			for _, name := range CostFigures {
				f, ok := r.Cost[name]
				if m == ModePeerCliques && (name == CostCliqueWatchEvents || name == CostCliqueWatchBytes) {
					continue
				}
				if !ok || f.Value <= 0 || f.PerDaemon <= 0 {
					t.Errorf("run %d, %s: cost %s %+v", i+1, m, name, f)
					continue
				}
				// The floor watches cliques that never exist: no events, so no ratio.
				floorless := name == CostCliqueWatchEvents || name == CostCliqueWatchBytes
				if floorless != (f.Ratio == nil) || (f.Ratio != nil && *f.Ratio <= 0) {
					t.Errorf("run %d, %s: cost %s: ratio %v against the floor's %v", i+1, m, name, f.Ratio, f.Floor)
				}
			}
			if f := r.RequestCost["PATCH pods/status"]; f.Ratio == nil || *f.Ratio <= 0 {
				t.Errorf("run %d, %s: PATCH pods/status against the floor: %+v", i+1, m, f)
			}
		}
	}
	for _, m := range []string{modeFloor, ModeCdplane, ModePeerCliques} {
		s, ok := rep.Summary[m]
		if !ok || s.Runs != 2 || s.Finished != 2 || s.Seconds.N != 2 || s.Seconds.Median <= 0 || s.Seconds.Min > s.Seconds.Max {
			t.Errorf("summary of %s: %+v", m, s)
			continue
		}
		if m == modeFloor {
			continue
		}
		if s.RatioToFloor == nil || s.RatioToFloor.N != 2 || s.RatioToFloor.Median <= 0 {
			t.Errorf("summary of %s: ratio to the floor %+v", m, s.RatioToFloor)
		}
		for _, name := range []string{CostAPIServerCPU, CostEtcdCPU, CostEtcdWALBytes, CostRequests, CostWatchEvents, CostWatchBytes} {
			if s.CostRatios[name] <= 0 {
				t.Errorf("summary of %s: no median ratio of %s: %v", m, name, s.CostRatios)
			}
		}
		if (m == ModeCdplane) != (s.CliqueWatchBytesOverLeast != nil) {
			t.Errorf("summary of %s: clique watch bytes over least %v", m, s.CliqueWatchBytesOverLeast)
		}
	}
}

func phaseOf(r Result, name string) Phase {
	for _, p := range r.Phases {
		if p.Name == name {
			return p
		}
	}
	return Phase{}
}

func joinedModes(rep *Report) string {
	var out []string
	for _, m := range AllModes {
		if _, ok := rep.Modes[m]; ok {
			out = append(out, m)
		}
	}
	return strings.Join(out, ",")
}

// controlPlaneBins returns the directory of the control plane's binaries ($CDPLANE_K8S_BINS,
// which `make test` sets), and skips the test without it.
func controlPlaneBins(t *testing.T) string {
	t.Helper()
	binDir := os.Getenv(controlplane.BinDirEnv)
	if binDir == "" {
		t.Skipf("$%s is not set: run with %s=$(hack/k8s-bins.sh | tail -n1)", controlplane.BinDirEnv, controlplane.BinDirEnv)
	}
	return binDir
}
