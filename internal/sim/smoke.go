package sim

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plot"
	"cdplane/internal/progress"
	"cdplane/internal/scheme"
	"cdplane/internal/sim/controlplane"
)

// JobOptions configure RunJob.
type JobOptions struct {
	// Nodes is how many nodes the job spans (one pod per node); 0 means every node of the
	// plane (the sim's first plane, or the legacy plane).
	Nodes int
	// Name of the ComputeDomain and the Job; Namespace theirs (default: the plane's workload
	// namespace, or "default").
	Name, Namespace string
	// Keep leaves the job and the domain in place.
	Keep    bool
	Timeout time.Duration
	Out     io.Writer
}

// JobResult is what RunJob measured.
type JobResult struct {
	Nodes int
	// Name and Namespace of the ComputeDomain and the Job.
	Name, Namespace string
	// Ready is the time from the apply until the domain's status was Ready; Running until
	// every pod of the job was Running.
	Ready, Running time.Duration
	// Samples are the counts RunJob saw while it waited, in time order: at the apply, about
	// once a second after, and at the moment it saw the domain Ready.
	Samples []JobSample
	// Breakdown is where the time went, from the API's timestamps; nil when the objects could
	// not be read.
	Breakdown *Breakdown
}

// JobSample is what RunJob saw at one moment.
type JobSample struct {
	// Seconds since the apply.
	Seconds float64
	// ReadyNodes is the domain's status.readyNodes: nodes of the domain whose daemon is Ready.
	ReadyNodes int
	// PodsRunning counts the job's pods Running.
	PodsRunning int
}

// Chart is the samples as a chart: nodes Ready in the domain and pods Running over the seconds
// since the apply.
func (r *JobResult) Chart() plot.Chart {
	nodes := plot.Series{Name: "nodes Ready in the domain", Points: make([]plot.Point, 0, len(r.Samples))}
	pods := plot.Series{Name: "pods Running", Points: make([]plot.Point, 0, len(r.Samples))}
	for _, s := range r.Samples {
		nodes.Points = append(nodes.Points, plot.Point{X: s.Seconds, Y: float64(s.ReadyNodes)})
		pods.Points = append(pods.Points, plot.Point{X: s.Seconds, Y: float64(s.PodsRunning)})
	}
	return plot.Chart{
		Title:  fmt.Sprintf("A %d-node ComputeDomain job (%s/%s)", r.Nodes, r.Namespace, r.Name),
		XLabel: "seconds since apply",
		YLabel: "count",
		Series: []plot.Series{nodes, pods},
	}
}

// RunJob runs a ComputeDomain job spanning o.Nodes nodes on the sim, the way a user does: a
// ComputeDomain with numNodes, and an Indexed Job, one pod per node, each claiming the
// domain's channel. It waits for the domain to be Ready and every pod Running, with progress,
// sampling the counts of nodes Ready and pods Running every second, then deletes both unless
// Keep. When the wait fails, the result so far comes with the error.
func RunJob(ctx context.Context, st *State, o JobOptions) (*JobResult, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Minute
	}
	planeID := ""
	if len(st.Planes) > 0 {
		planeID = st.Planes[0]
	}
	eligible := 0
	for _, n := range st.Nodes {
		if n.Plane == planeID {
			eligible++
		}
	}
	if o.Nodes == 0 {
		o.Nodes = eligible
	}
	if o.Nodes < 1 || o.Nodes > eligible {
		return nil, fmt.Errorf("a job of %d nodes does not fit: the plane has %d nodes", o.Nodes, eligible)
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("job-%d", o.Nodes)
	}
	if o.Namespace == "" {
		o.Namespace = "default"
		if planeID != "" {
			o.Namespace = planeID + "-workloads"
		}
	}
	c, err := st.client()
	if err != nil {
		return nil, err
	}
	cd, job := jobObjects(o)
	start := time.Now()
	fmt.Fprintf(o.Out, "Creating ComputeDomain %s/%s (numNodes %d) and Job %s of %d pods\n", o.Namespace, o.Name, o.Nodes, o.Name, o.Nodes)
	if err := c.Create(ctx, cd); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, job); err != nil {
		return nil, err
	}
	res := &JobResult{Nodes: o.Nodes, Name: o.Name, Namespace: o.Namespace}
	// Nothing is Ready or Running at the apply; after, a sample per poll (every second).
	res.Samples = append(res.Samples, JobSample{})
	watched, stopWatch, err := st.watchJob(ctx, o)
	if err != nil {
		return res, err
	}
	defer stopWatch()
	err = progress.Wait(ctx, o.Out, o.Timeout, time.Second, "the ComputeDomain to be Ready and every pod Running", func(ctx context.Context) (bool, string, error) {
		// Read from the watch: a poll that listed the job's pods every second was, in a large
		// job, a list of every pod a second from the apiserver the job measures.
		cur := &cdv1beta1.ComputeDomain{}
		if err := watched.Get(ctx, client.ObjectKeyFromObject(cd), cur); err != nil {
			if apierrors.IsNotFound(err) {
				return false, "the domain is not in the watch yet", nil
			}
			return false, "", err
		}
		last := res.Samples[len(res.Samples)-1]
		readyNodes := int(cur.Status.ReadyNodes)
		if res.Ready == 0 && cur.Status.Status == "Ready" {
			res.Ready = time.Since(start)
			// The moment the domain was seen Ready, with the pods as last counted.
			res.Samples = append(res.Samples, JobSample{Seconds: res.Ready.Seconds(), ReadyNodes: readyNodes, PodsRunning: last.PodsRunning})
		}
		pods := &corev1.PodList{}
		if err := watched.List(ctx, pods, client.InNamespace(o.Namespace), client.MatchingLabels{"job-name": o.Name}); err != nil {
			return false, "", err
		}
		seen := time.Since(start)
		phases := map[corev1.PodPhase]int{}
		for _, p := range pods.Items {
			phases[p.Status.Phase]++
		}
		if res.Running == 0 && phases[corev1.PodRunning] == o.Nodes {
			res.Running = seen
		}
		res.Samples = append(res.Samples, JobSample{Seconds: seen.Seconds(), ReadyNodes: readyNodes, PodsRunning: phases[corev1.PodRunning]})
		status := fmt.Sprintf("domain %s, %d of %d daemons Ready; pods: %d Running, %d Pending", orNotReady(cur.Status.Status),
			cur.Status.ReadyNodes, o.Nodes, phases[corev1.PodRunning], phases[corev1.PodPending])
		return res.Ready > 0 && res.Running > 0, status, nil
	})
	// Read before the deletion, and on failure too: it shows which step stalled. A job that
	// timed out left an overloaded apiserver behind, whose lists can fail or time out: the
	// reads are retried for up to two minutes, and a failure is said rather than swallowed.
	// An interrupted job is read too, briefly, from a context the interrupt did not end.
	readCtx, cancelRead, interrupted := breakdownContext(ctx)
	defer cancelRead()
	if interrupted {
		fmt.Fprintf(o.Out, "Interrupted: reading the timestamps for the breakdown (at most %s; interrupt again to end at once)\n", interruptedReadFor)
	}
	if b, berr := readBreakdownRetrying(readCtx, c, cd, o); berr == nil {
		res.Breakdown = b
	} else {
		fmt.Fprintf(o.Out, "Reading the timestamps for the breakdown: %v\n", berr)
	}
	if err != nil {
		// What was seen until then is returned too: the samples show where it stalled. The
		// job and its domain stay for a look at them.
		fmt.Fprintf(o.Out, "The Job and the ComputeDomain are left in place; delete them with: kubectl delete job,computedomain -n %s %s\n", o.Namespace, o.Name)
		return res, err
	}
	if !o.Keep {
		fmt.Fprintf(o.Out, "Deleting the Job and the ComputeDomain\n")
		if err := c.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			return res, err
		}
		if err := c.Delete(ctx, cd); err != nil {
			return res, err
		}
	}
	return res, nil
}

// watchJob starts a watch cache of the job's domain and pods and waits for it to be filled.
// stop ends it. An overloaded apiserver only delays the watch's events; the cache retries what
// fails, as an informer does.
func (st *State) watchJob(ctx context.Context, o JobOptions) (client.Reader, func(), error) {
	cfg, err := st.restConfig()
	if err != nil {
		return nil, nil, err
	}
	ns := map[string]cache.Config{o.Namespace: {}}
	c, err := cache.New(cfg, cache.Options{
		Scheme:           scheme.New(),
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:              {Namespaces: ns, Label: labels.SelectorFromSet(labels.Set{"job-name": o.Name})},
			&cdv1beta1.ComputeDomain{}: {Namespaces: ns, Field: fields.OneTermEqualSelector("metadata.name", o.Name)},
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("watching the job: %w", err)
	}
	watchCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Start(watchCtx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	for _, obj := range []client.Object{&corev1.Pod{}, &cdv1beta1.ComputeDomain{}} {
		// GetInformer registers the informer; it waits for the first list only when the cache
		// has already started, which the goroutine above may not have done yet.
		if _, err := c.GetInformer(ctx, obj); err != nil {
			stop()
			return nil, nil, fmt.Errorf("watching the job: %w", err)
		}
	}
	// Waits for the start, then for both informers' first lists.
	if !c.WaitForCacheSync(ctx) {
		stop()
		return nil, nil, fmt.Errorf("watching the job: the watch did not fill: %w", context.Cause(ctx))
	}
	return c, stop, nil
}

// breakdownReadFor bounds readBreakdownRetrying.
const breakdownReadFor = 2 * time.Minute

// interruptedReadFor bounds the breakdown's reads after an interrupt: the user asked to stop,
// and gets what can be read quickly.
const interruptedReadFor = 30 * time.Second

// breakdownContext returns the context the breakdown is read in: ctx itself, or, when ctx has
// ended (an interrupt; the job's own --timeout does not end it), one that keeps its values
// without its cancellation and ends after interruptedReadFor. interrupted says which.
func breakdownContext(ctx context.Context) (_ context.Context, cancel context.CancelFunc, interrupted bool) {
	if ctx.Err() == nil {
		return ctx, func() {}, false
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptedReadFor)
	return rctx, cancel, true
}

// readBreakdownRetrying is readBreakdown, retried with backoff while it fails for up to
// breakdownReadFor or until ctx ends (an interrupt; the job's own --timeout does not end ctx).
func readBreakdownRetrying(ctx context.Context, c client.Client, cd *cdv1beta1.ComputeDomain, o JobOptions) (*Breakdown, error) {
	ctx, cancel := context.WithTimeout(ctx, breakdownReadFor)
	defer cancel()
	b, last := readBreakdown(ctx, c, cd, o)
	if last == nil {
		return b, nil
	}
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: time.Second, Factor: 2, Cap: 20 * time.Second, Steps: 1 << 20},
		func(ctx context.Context) (bool, error) {
			b, last = readBreakdown(ctx, c, cd, o)
			return last == nil, nil
		})
	if err != nil {
		return nil, fmt.Errorf("%w (last error: %w)", err, last)
	}
	return b, nil
}

// readBreakdown reads the domain, its daemon pods and the job's pods, and computes where the
// time went.
func readBreakdown(ctx context.Context, c client.Client, cd *cdv1beta1.ComputeDomain, o JobOptions) (*Breakdown, error) {
	// From the apiserver's watch cache (resourceVersion 0): a consistent list waits for that
	// cache to catch up with etcd, and after a large job that timed out the apiserver was too
	// far behind for a list of the job's pods to finish at all. Timestamps a moment old change
	// nothing here.
	cur := &cdv1beta1.ComputeDomain{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cd), cur, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}}); err != nil {
		return nil, err
	}
	anyVersion := &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}
	workloads := &corev1.PodList{}
	if err := c.List(ctx, workloads, client.InNamespace(o.Namespace), client.MatchingLabels{"job-name": o.Name}, anyVersion); err != nil {
		return nil, err
	}
	// The daemon pods carry the domain's UID, in the plane's driver namespace.
	labelled := &corev1.PodList{}
	if err := c.List(ctx, labelled, client.MatchingLabels{cdv1beta1.ComputeDomainLabel: string(cur.UID)}, anyVersion); err != nil {
		return nil, err
	}
	daemons := slices.DeleteFunc(labelled.Items, func(p corev1.Pod) bool { return p.Namespace == o.Namespace && p.Labels["job-name"] == o.Name })
	b := ComputeBreakdown(cur, daemons, workloads.Items)
	return &b, nil
}

func orNotReady(s string) string {
	if s == "" {
		return "NotReady"
	}
	return s
}

// jobObjects are the README sample's objects, sized.
func jobObjects(o JobOptions) (*cdv1beta1.ComputeDomain, *batchv1.Job) {
	cd := &cdv1beta1.ComputeDomain{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace},
		Spec: cdv1beta1.ComputeDomainSpec{
			NumNodes: o.Nodes,
			Channel:  &cdv1beta1.ComputeDomainChannelSpec{ResourceClaimTemplate: cdv1beta1.ComputeDomainResourceClaimTemplate{Name: o.Name}},
		},
	}
	labels := map[string]string{"app": o.Name}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace},
		Spec: batchv1.JobSpec{
			Completions:    ptr.To(int32(o.Nodes)),
			Parallelism:    ptr.To(int32(o.Nodes)),
			CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
							TopologyKey:   corev1.LabelHostname,
						}},
					}},
					Containers: []corev1.Container{{
						Name: "ctr", Image: "ubuntu:24.04",
						Command:   []string{"bash", "-c"},
						Args:      []string{"ls -la /dev/nvidia-caps-imex-channels; trap 'exit 0' TERM; sleep 9999 & wait"},
						Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "imex-channel"}}},
					}},
					ResourceClaims: []corev1.PodResourceClaim{{Name: "imex-channel", ResourceClaimTemplateName: ptr.To(o.Name)}},
				},
			},
		},
	}
	return cd, job
}

// ProcessMemory is the peak resident memory of the sim's processes of one name.
type ProcessMemory struct {
	Name  string
	Count int
	// MaxPeak is the largest peak (VmHWM) of one process; SumPeak the sum over the processes.
	MaxPeak, SumPeak uint64
}

// PeakMemory reads the peak resident memory (VmHWM) of every process of the sim: the control
// plane's and the simulated kubelet's from the state, and the kubelet's children (the pods'
// processes), grouped by executable name.
func PeakMemory(st *State) ([]ProcessMemory, error) {
	groups := map[string]*ProcessMemory{}
	add := func(name string, pid int) {
		hwm, err := vmHWM(pid)
		if err != nil {
			return
		}
		g := groups[name]
		if g == nil {
			g = &ProcessMemory{Name: name}
			groups[name] = g
		}
		g.Count++
		g.SumPeak += hwm
		g.MaxPeak = max(g.MaxPeak, hwm)
	}
	var kubeletPIDs []int
	for _, p := range st.Processes {
		if !controlplane.Alive(p) {
			continue
		}
		name := p.Name
		if strings.HasPrefix(name, "sim-kubelet") {
			name = "sim-kubelet"
			kubeletPIDs = append(kubeletPIDs, p.PID)
		}
		add(name, p.PID)
	}
	for _, kubeletPID := range kubeletPIDs {
		children, err := childrenOf(kubeletPID)
		if err != nil {
			return nil, err
		}
		for _, pid := range children {
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			if err != nil {
				continue
			}
			add(filepath.Base(exe), pid)
		}
	}
	out := make([]ProcessMemory, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SumPeak > out[j].SumPeak })
	return out, nil
}

// vmHWM is a process's peak resident set in bytes.
func vmHWM(pid int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("pid %d: unexpected VmHWM %q", pid, rest)
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("pid %d: no VmHWM", pid)
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) ([]int, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so parse after the last ')'.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == pid {
			if child, err := strconv.Atoi(filepath.Base(filepath.Dir(path))); err == nil {
				out = append(out, child)
			}
		}
	}
	return out, nil
}
