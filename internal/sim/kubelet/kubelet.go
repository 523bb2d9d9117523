package kubelet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Defaults of Config.
const (
	DefaultLeaseDuration            = 40 * time.Second
	DefaultLeaseRenewInterval       = 10 * time.Second
	DefaultNodeStatusReportInterval = 5 * time.Minute
	DefaultPluginPollInterval       = time.Second
	DefaultQPS                      = 200
	DefaultBurst                    = 400
	DefaultKubeletVersion           = "v1.37.2-sim"
	DefaultRestartBackoffReset      = 10 * time.Minute
)

// DefaultRestartBackoff is the kubelet's between container restarts: 10s doubling to 5m.
var DefaultRestartBackoff = wait.Backoff{Duration: 10 * time.Second, Factor: 2, Cap: 5 * time.Minute, Steps: math.MaxInt32}

// DefaultPrepareBackoff spaces retries of a failing NodePrepareResources call: 1s doubling to 30s.
var DefaultPrepareBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}

// Config configures a simulated kubelet.
type Config struct {
	// RESTConfig reaches the apiserver as a cluster administrator. Required.
	RESTConfig *rest.Config
	// APIServerURL and APIServerCA go into the kubeconfigs generated for pods; default:
	// RESTConfig's host and CA.
	APIServerURL string
	APIServerCA  []byte
	// StateDir holds the nodes' directories (<StateDir>/nodes/<name>). Required. Unix sockets
	// are created below it (limit 108 bytes per path): keep it short.
	StateDir string
	// Nodes are the simulated nodes. At least one.
	Nodes []NodeSpec
	// Runner starts containers; default: NoopRunner for every image.
	Runner Runner
	// PodCIDR is the loopback range pod addresses come from (DefaultPodCIDR).
	PodCIDR string
	// KubeletPort is the port of every node's log endpoint on its InternalIP; 0 picks a free
	// port per node.
	KubeletPort int
	// LeaseDuration and LeaseRenewInterval of the node Leases (40s, 10s; each renewal jittered
	// by up to ±10%).
	LeaseDuration      time.Duration
	LeaseRenewInterval time.Duration
	// MinProbePeriod is the shortest period any probe runs at; a probe whose periodSeconds is
	// shorter runs this often instead (its failureThreshold and timeout unchanged). Zero: every
	// probe as its spec says, as a kubelet does.
	MinProbePeriod time.Duration
	// MinProbeTimeout is the shortest timeout any probe runs with; a probe whose timeoutSeconds
	// is shorter gets this long instead. Zero: every probe as its spec says, as a kubelet does.
	MinProbeTimeout time.Duration
	// MinLivenessFailures is the fewest consecutive failures that kill a container by its
	// liveness probe; a probe whose failureThreshold is lower is given this many instead. Zero:
	// every probe as its spec says, as a kubelet does.
	MinLivenessFailures int32
	// NodeStatusReportInterval is how often a node's status is written when nothing changed (5m).
	NodeStatusReportInterval time.Duration
	// RestartBackoff spaces a container's restarts: Duration doubling up to Cap (10s, 5m, as a
	// kubelet's CrashLoopBackOff); unset fields take DefaultRestartBackoff's.
	RestartBackoff wait.Backoff
	// RestartBackoffReset: a container that ran at least this long restarts after
	// RestartBackoff.Duration again (10m, as a kubelet).
	RestartBackoffReset time.Duration
	// PrepareBackoff spaces retries of a failing pod set-up or DRA prepare or unprepare (1s
	// doubling up to 30s); unset fields take DefaultPrepareBackoff's.
	PrepareBackoff wait.Backoff
	// PluginPollInterval is how often the plugin registry directories are scanned (1s).
	PluginPollInterval time.Duration
	// QPS and Burst of the kubelet's API client (200, 400): all nodes share it.
	QPS   float32
	Burst int
	// KubeletVersion is reported in each Node's nodeInfo.
	KubeletVersion string
	// HostEnv, when set, is added to the environment of every container on a node: what the
	// node's host gives its containers (a driver root on PATH, where the host's files are).
	HostEnv func(node, nodeDir string) []EnvVar
}

// NodeSpec is one simulated node.
type NodeSpec struct {
	// Name of the Node.
	Name string
	// Labels are set on the Node, with kubernetes.io/hostname=<name> added.
	Labels map[string]string
	// Capacity (cpu, memory, pods, …) is also the allocatable.
	Capacity corev1.ResourceList
	// InternalIP is the node's loopback address, unique per node (e.g. 127.10.0.1).
	InternalIP string
}

func (c *Config) defaults() error {
	if c.RESTConfig == nil {
		return errors.New("a REST config is required")
	}
	if c.StateDir == "" {
		return errors.New("a state directory is required")
	}
	if len(c.Nodes) == 0 {
		return errors.New("at least one node is required")
	}
	if c.APIServerURL == "" {
		c.APIServerURL = c.RESTConfig.Host
	}
	if len(c.APIServerCA) == 0 {
		c.APIServerCA = c.RESTConfig.CAData
		if len(c.APIServerCA) == 0 && c.RESTConfig.CAFile != "" {
			data, err := os.ReadFile(c.RESTConfig.CAFile)
			if err != nil {
				return fmt.Errorf("reading the apiserver CA: %w", err)
			}
			c.APIServerCA = data
		}
	}
	if c.Runner == nil {
		c.Runner = &Router{Default: NoopRunner{}}
	}
	if c.PodCIDR == "" {
		c.PodCIDR = DefaultPodCIDR
	}
	setDuration(&c.LeaseDuration, DefaultLeaseDuration)
	setDuration(&c.LeaseRenewInterval, DefaultLeaseRenewInterval)
	setDuration(&c.NodeStatusReportInterval, DefaultNodeStatusReportInterval)
	setDuration(&c.PluginPollInterval, DefaultPluginPollInterval)
	c.RestartBackoff = backoffOrDefault(c.RestartBackoff, DefaultRestartBackoff)
	setDuration(&c.RestartBackoffReset, DefaultRestartBackoffReset)
	c.PrepareBackoff = backoffOrDefault(c.PrepareBackoff, DefaultPrepareBackoff)
	if c.QPS <= 0 {
		c.QPS = DefaultQPS
	}
	if c.Burst <= 0 {
		c.Burst = DefaultBurst
	}
	if c.KubeletVersion == "" {
		c.KubeletVersion = DefaultKubeletVersion
	}
	return nil
}

func setDuration(p *time.Duration, def time.Duration) {
	if *p <= 0 {
		*p = def
	}
}

// backoffOrDefault returns b with its unset fields (zero or less) taken from def, and a first
// delay no longer than the cap.
func backoffOrDefault(b, def wait.Backoff) wait.Backoff {
	setDuration(&b.Duration, def.Duration)
	setDuration(&b.Cap, def.Cap)
	if b.Factor <= 0 {
		b.Factor = def.Factor
	}
	if b.Steps <= 0 {
		b.Steps = def.Steps
	}
	if b.Jitter <= 0 {
		b.Jitter = def.Jitter
	}
	b.Duration = min(b.Duration, b.Cap)
	return b
}

// nextRestartDelay is the delay before a container's next start, given its restart backoff (the
// sequence so far, RestartBackoff at first) and how long its last run lasted: the backoff's next
// step, from the start again after a run of RestartBackoffReset or longer.
func (c *Config) nextRestartDelay(b *wait.Backoff, ran time.Duration) time.Duration {
	if ran >= c.RestartBackoffReset {
		*b = c.RestartBackoff
	}
	return b.Step()
}

// Kubelet simulates the kubelets of many nodes.
type Kubelet struct {
	cfg      Config
	client   kubernetes.Interface
	runner   Runner
	ips      *IPAllocator
	nodes    map[string]*node
	order    []*node
	cert     tls.Certificate
	events   record.EventBroadcaster
	started  chan struct{}
	mu       sync.Mutex
	workers  map[types.UID]*podWorker
	workerWG sync.WaitGroup
}

// New validates the configuration and prepares the nodes' directories; Run starts them.
func New(cfg Config) (*Kubelet, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rc := rest.CopyConfig(cfg.RESTConfig)
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	rc.UserAgent = "cdplane-sim-kubelet"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("creating the API client: %w", err)
	}
	k := &Kubelet{
		cfg: cfg, client: client, runner: cfg.Runner, nodes: map[string]*node{},
		started: make(chan struct{}), workers: map[types.UID]*podWorker{},
	}
	var nodeIPs []netip.Addr
	var hosts []string
	for _, spec := range cfg.Nodes {
		if spec.Name == "" {
			return nil, errors.New("a node needs a name")
		}
		if _, dup := k.nodes[spec.Name]; dup {
			return nil, fmt.Errorf("node %s given twice", spec.Name)
		}
		ip, err := netip.ParseAddr(spec.InternalIP)
		if err != nil || !loopback.Contains(ip) || IMEXSentinelPrefix.Contains(ip) {
			return nil, fmt.Errorf("node %s: internal IP %q must be a loopback address outside %s (IMEX's sentinel addresses)",
				spec.Name, spec.InternalIP, IMEXSentinelPrefix)
		}
		for _, other := range nodeIPs {
			if other == ip {
				return nil, fmt.Errorf("node %s: internal IP %s used twice", spec.Name, ip)
			}
		}
		nodeIPs = append(nodeIPs, ip)
		hosts = append(hosts, spec.Name)
		n := newNode(k, spec, ip, filepath.Join(cfg.StateDir, "nodes", spec.Name))
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, fmt.Errorf("node %s: %w", spec.Name, err)
		}
		k.nodes[spec.Name] = n
		k.order = append(k.order, n)
	}
	if k.ips, err = NewIPAllocator(cfg.PodCIDR, nodeIPs...); err != nil {
		return nil, err
	}
	if k.cert, err = selfSignedCert(nodeIPs, hosts); err != nil {
		return nil, err
	}
	return k, nil
}

// NodeDir returns the directory of a node: host paths of its pods are remapped below it.
func (k *Kubelet) NodeDir(name string) string {
	return filepath.Join(k.cfg.StateDir, "nodes", name)
}

// Started is closed once every node is registered, serves logs and its pods are watched.
func (k *Kubelet) Started() <-chan struct{} { return k.started }

// Run registers the nodes, serves them and runs their pods until ctx ends; then it kills every
// container it runs (pods stay in the API, as when a kubelet stops) and returns.
func (k *Kubelet) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("sim-kubelet")
	ctx = klog.NewContext(ctx, logger)
	k.events = record.NewBroadcaster(record.WithContext(ctx))
	k.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: k.client.CoreV1().Events("")})
	defer k.events.Shutdown()
	for _, n := range k.order {
		n.recorder = k.events.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: "kubelet", Host: n.spec.Name})
	}

	if err := k.registerNodes(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, n := range k.order {
		if err := n.serveLogs(ctx, &wg); err != nil {
			return err
		}
	}
	if err := k.updateNodeStatuses(ctx); err != nil {
		return err
	}
	wg.Add(2)
	go func() { defer wg.Done(); k.renewLeases(ctx) }()
	go func() { defer wg.Done(); k.watchPlugins(ctx) }()
	if err := k.watchPods(ctx, &wg); err != nil {
		return err
	}
	logger.Info("Simulated kubelet started", "nodes", len(k.order))
	close(k.started)
	<-ctx.Done()
	k.stopWorkers()
	for _, n := range k.order {
		n.closePlugins()
	}
	return nil
}

// stopWorkers kills every container and waits for the pod workers to return.
func (k *Kubelet) stopWorkers() {
	k.mu.Lock()
	workers := make([]*podWorker, 0, len(k.workers))
	for _, w := range k.workers {
		workers = append(workers, w)
	}
	k.mu.Unlock()
	for _, w := range workers {
		w.killAll()
	}
	k.workerWG.Wait()
}
