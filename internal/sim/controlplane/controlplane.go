// Package controlplane starts and stops a Kubernetes control plane — etcd, kube-apiserver and,
// on request, kube-controller-manager and kube-scheduler, from the builds of hack/k8s-bins.sh —
// as processes bound to loopback only (etcd, which authenticates no client, to Unix sockets in
// a directory only its owner can enter), with credentials of its own. It is the one launcher of
// the project: `cdplane sim up` starts it detached, so that the command can return while the
// cluster keeps running and `cdplane sim down` can stop exactly what was started (by PID,
// checked against the start time and command line); the test harness (internal/testutil/cluster) and `cdplane bench`
// start it attached, so that its processes die with the process that started them.
package controlplane

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ControlPlane is a started control plane. It is written to the simulated cluster's state
// file; its credentials stay in the pki directory beside CAFile.
type ControlPlane struct {
	// APIServerURL is https://127.0.0.1:<port>.
	APIServerURL string `json:"apiServerURL"`
	// Kubeconfig is the administrator's kubeconfig.
	Kubeconfig string `json:"kubeconfig"`
	// CAFile is the cluster CA.
	CAFile string `json:"caFile"`
	// Processes in start order.
	Processes []Process `json:"processes"`
}

// Options configure Start.
type Options struct {
	// Dir holds the credentials (pki/), logs (logs/) and etcd's data (etcd/).
	Dir string
	// BinDir holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler (see BinDir).
	BinDir string
	// Detached starts the processes in their own sessions, to outlive the caller (sim up);
	// otherwise the kernel kills each when the caller exits (tests, benchmarks).
	Detached bool
	// ControllerManager starts kube-controller-manager with Controllers.
	ControllerManager bool
	// Controllers run by kube-controller-manager; default "*" (all that are on by default).
	Controllers []string
	// Scheduler starts kube-scheduler.
	Scheduler bool
	// InstallCRDs installs cdplane's CRDs (those of the embedded prerequisites chart) and waits
	// until they are served.
	InstallCRDs bool
	// APIServerArgs are kube-apiserver flags, name to values, added to or replacing the
	// defaults of apiServerFlags.
	APIServerArgs map[string][]string
	// ControllerManagerArgs are kube-controller-manager flags, as APIServerArgs.
	ControllerManagerArgs map[string][]string
	// NodeMonitorGracePeriod is how long kube-controller-manager waits for a node's Lease
	// renewal before marking the node NotReady; zero: its default (50 s).
	NodeMonitorGracePeriod time.Duration
	// Progress receives a line per step; nil: none.
	Progress func(format string, args ...any)
	// Started is called with each process as soon as it runs, so a caller can record it
	// before the next step can fail.
	Started func(Process)
}

// Timeouts of Start and of stopping a failed start.
const (
	etcdStartTimeout      = time.Minute
	componentStartTimeout = 2 * time.Minute
	failedStartStop       = 15 * time.Second
)

// Start starts the control plane and waits until each component is healthy. On failure it
// stops what it started and returns an error naming the component and the tail of its log.
func Start(ctx context.Context, o Options) (_ *ControlPlane, err error) {
	if o.Dir == "" || o.BinDir == "" {
		return nil, fmt.Errorf("starting the control plane: a directory (%q) and the binaries' directory (%q) are required", o.Dir, o.BinDir)
	}
	progress := o.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	p := pki{dir: filepath.Join(o.Dir, "pki")}
	if err := p.generate(); err != nil {
		return nil, fmt.Errorf("generating credentials: %w", err)
	}
	logs := filepath.Join(o.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	sockets, err := etcdSockets(o.Dir)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{CAFile: p.path("ca.crt"), Kubeconfig: filepath.Join(o.Dir, "kubeconfig")}
	defer func() {
		if err != nil {
			_ = Stop(cp.Processes, failedStartStop)
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	apiPort, kcmPort, schedPort := ports[0], ports[1], ports[2]
	// startIn starts a component in working directory wd ("": this process's).
	startIn := func(wd, name string, args []string) (Process, error) {
		proc, err := startProcess(Process{Name: name, Binary: filepath.Join(o.BinDir, name), Args: args, Dir: wd,
			Log: filepath.Join(logs, name+".log"), Attached: !o.Detached})
		if err == nil {
			cp.Processes = append(cp.Processes, proc)
			if o.Started != nil {
				o.Started(proc)
			}
		}
		return proc, err
	}
	start := func(name string, args []string) (Process, error) { return startIn("", name, args) }

	progress("Starting etcd")
	etcd, err := startIn(sockets.dir, "etcd", etcdFlags(o, sockets).args())
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, etcd, "http://etcd/health", sockets.httpClient(), etcdStartTimeout); err != nil {
		return nil, err
	}

	progress("Starting kube-apiserver")
	cp.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	api, err := start("kube-apiserver", apiServerFlags(o, p, sockets.clientURL(), apiPort).args())
	if err != nil {
		return nil, err
	}
	admin, err := tlsClient(p)
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, api, cp.APIServerURL+"/readyz", admin, componentStartTimeout); err != nil {
		return nil, err
	}
	if err := writeKubeconfig(cp.Kubeconfig, cp.APIServerURL, p); err != nil {
		return nil, err
	}
	if o.InstallCRDs {
		progress("Installing cdplane's CRDs")
		cfg, err := cp.AdminConfig()
		if err != nil {
			return nil, err
		}
		if err := installCRDs(ctx, cfg, componentStartTimeout); err != nil {
			return nil, err
		}
	}
	if err := startComponents(ctx, o, cp, p, start, kcmPort, schedPort, progress); err != nil {
		return nil, err
	}
	return cp, nil
}

// startComponents starts kube-controller-manager and kube-scheduler, as o asks, and waits
// until both are healthy.
func startComponents(ctx context.Context, o Options, cp *ControlPlane, p pki, start func(string, []string) (Process, error),
	kcmPort, schedPort int, progress func(string, ...any)) error {
	type started struct {
		proc Process
		port int
	}
	var wait []started
	if o.ControllerManager {
		progress("Starting kube-controller-manager")
		kcm, err := start("kube-controller-manager", controllerManagerFlags(o, cp, p, kcmPort).args())
		if err != nil {
			return err
		}
		wait = append(wait, started{kcm, kcmPort})
	}
	if o.Scheduler {
		progress("Starting kube-scheduler")
		sched, err := start("kube-scheduler", componentFlags(cp, p, "kube-scheduler", schedPort).args())
		if err != nil {
			return err
		}
		wait = append(wait, started{sched, schedPort})
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health checks of our own self-signed components
	for _, s := range wait {
		if err := waitHealthy(ctx, s.proc, fmt.Sprintf("https://127.0.0.1:%d/healthz", s.port), insecure, componentStartTimeout); err != nil {
			return err
		}
	}
	return nil
}

// AdminConfig returns a client configuration of the administrator (group system:masters), with
// the CA and credentials inlined (CAData), so that a copy with other credentials still trusts
// the apiserver.
func (cp *ControlPlane) AdminConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the control plane's kubeconfig: %w", err)
	}
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, fmt.Errorf("reading the control plane's certificates: %w", err)
	}
	return cfg, nil
}

// Stop stops the control plane's processes (see Stop).
func (cp *ControlPlane) Stop(timeout time.Duration) error {
	return Stop(cp.Processes, timeout)
}

// apiServerFlags are kube-apiserver's flags: a realistic single-node control plane (Node and
// RBAC authorization, service-account tokens), then o.APIServerArgs.
func apiServerFlags(o Options, p pki, etcdURL string, port int) flags {
	f := flags{}
	f.set("etcd-servers", etcdURL)
	// Every request authenticates: a client certificate of the cluster CA or a token.
	f.set("anonymous-auth", "false")
	f.set("bind-address", "127.0.0.1")
	f.set("advertise-address", "127.0.0.1")
	f.set("secure-port", strconv.Itoa(port))
	f.set("cert-dir", filepath.Join(p.dir, "apiserver-cert-dir"))
	f.set("tls-cert-file", p.path("apiserver.crt"))
	f.set("tls-private-key-file", p.path("apiserver.key"))
	f.set("client-ca-file", p.path("ca.crt"))
	f.set("service-account-issuer", "https://kubernetes.default.svc.cluster.local")
	f.set("service-account-key-file", p.path("sa.pub"))
	f.set("service-account-signing-key-file", p.path("sa.key"))
	f.set("authorization-mode", "Node,RBAC")
	f.set("allow-privileged", "true")
	f.set("service-cluster-ip-range", "10.96.0.0/16")
	f.set("kubelet-preferred-address-types", "InternalIP")
	f.set("kubelet-client-certificate", p.path("apiserver-kubelet-client.crt"))
	f.set("kubelet-client-key", p.path("apiserver-kubelet-client.key"))
	f.set("endpoint-reconciler-type", "none")
	if !createsServiceAccounts(o) {
		// Nothing creates a namespace's default ServiceAccount, which the admission plugin
		// would require of every pod.
		f.set("disable-admission-plugins", "ServiceAccount")
	}
	f.merge(o.APIServerArgs)
	return f
}

// createsServiceAccounts reports whether kube-controller-manager runs the controller that
// creates each namespace's default ServiceAccount.
func createsServiceAccounts(o Options) bool {
	if !o.ControllerManager {
		return false
	}
	cs := controllers(o)
	return slices.Contains(cs, "*") && !slices.Contains(cs, "-serviceaccount") && !slices.Contains(cs, "-serviceaccount-controller") ||
		slices.Contains(cs, "serviceaccount") || slices.Contains(cs, "serviceaccount-controller")
}

func controllers(o Options) []string {
	if len(o.Controllers) == 0 {
		return []string{"*"}
	}
	return o.Controllers
}

// controllerManagerFlags are kube-controller-manager's flags, then o.ControllerManagerArgs.
func controllerManagerFlags(o Options, cp *ControlPlane, p pki, port int) flags {
	f := componentFlags(cp, p, "kube-controller-manager", port)
	f.set("controllers", strings.Join(controllers(o), ","))
	f.set("service-account-private-key-file", p.path("sa.key"))
	f.set("root-ca-file", p.path("ca.crt"))
	f.set("use-service-account-credentials", "false")
	// The default 20 requests/s makes untainting thousands of new nodes, and creating a
	// DaemonSet's pod on each, take minutes.
	f.set("kube-api-qps", "200")
	f.set("kube-api-burst", "400")
	grace := o.NodeMonitorGracePeriod
	if grace == 0 {
		grace = 50 * time.Second
	}
	f.set("node-monitor-grace-period", grace.String())
	f.merge(o.ControllerManagerArgs)
	return f
}

// componentFlags are the flags kube-controller-manager and kube-scheduler share: the
// administrator's kubeconfig, health checks on a loopback port, no leader election.
func componentFlags(cp *ControlPlane, p pki, name string, port int) flags {
	f := flags{}
	f.set("kubeconfig", cp.Kubeconfig)
	f.set("authentication-kubeconfig", cp.Kubeconfig)
	f.set("authorization-kubeconfig", cp.Kubeconfig)
	f.set("bind-address", "127.0.0.1")
	f.set("secure-port", strconv.Itoa(port))
	f.set("cert-dir", filepath.Join(p.dir, name+"-cert-dir"))
	f.set("leader-elect", "false")
	return f
}

// flags is a command line of --name=value flags in the order first set; a flag with several
// values is repeated.
type flags struct {
	names  []string
	values map[string][]string
}

// set sets (or replaces) the values of a flag.
func (f *flags) set(name string, values ...string) {
	if f.values == nil {
		f.values = map[string][]string{}
	}
	if _, ok := f.values[name]; !ok {
		f.names = append(f.names, name)
	}
	f.values[name] = values
}

// merge sets each flag of m, new names in sorted order.
func (f *flags) merge(m map[string][]string) {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f.set(strings.TrimPrefix(name, "--"), m[name]...)
	}
}

func (f flags) args() []string {
	var out []string
	for _, name := range f.names {
		for _, v := range f.values[name] {
			out = append(out, "--"+name+"="+v)
		}
	}
	return out
}
