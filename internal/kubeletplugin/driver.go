package kubeletplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/claims"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/endpoints"
	"cdplane/internal/nvml"
	"cdplane/internal/plane"
)

// Defaults of Options.
const (
	DefaultRegistrarDir     = draplugin.KubeletRegistryDir
	DefaultPluginDataDir    = draplugin.KubeletPluginsDir + "/" + cdv1beta1.DriverName
	DefaultCDIRoot          = "/var/run/cdi"
	DefaultReadyWaitTimeout = 15 * time.Second
	// DefaultStatusFallbackAfter is as long as a daemon waits for its clique before it reads
	// its domain (daemon.CliqueWait).
	DefaultStatusFallbackAfter = 2 * time.Minute
	DefaultCliqueRefreshPeriod = time.Minute
	// DefaultStaleSweepInterval is how often the plugin looks for claims it still holds whose
	// ResourceClaim is gone, and for CDI specs of claims it does not know.
	DefaultStaleSweepInterval = 10 * time.Minute
)

// Options configure the plugin.
type Options struct {
	// NodeName is the node the plugin serves. Required.
	NodeName string
	// DriverNamespace is the plane's driver namespace: cliques and daemon claims live there.
	// Required.
	DriverNamespace string
	// Config reaches the apiserver. Required.
	Config *rest.Config
	// Mapper is the REST mapper of the plugin's API client and watch cache; nil: each discovers
	// its own (component.Invocation.Mapper).
	Mapper meta.RESTMapper
	// Discoverer finds the node's clique. Required.
	Discoverer nvml.Discoverer
	// ReadHostFile reads the host's /proc files (ProcDevices, IMEXMgmtCapability); nil:
	// os.ReadFile.
	ReadHostFile func(path string) ([]byte, error)

	// RegistrarDir is the kubelet's plugin registry directory.
	RegistrarDir string
	// PluginDataDir holds the DRA gRPC socket.
	PluginDataDir string
	// CDIRoot is the directory claim CDI specs are written to.
	CDIRoot string
	// StateDir holds the checkpoint and the domains' IMEX config directories.
	StateDir string
	// ProcDevices and IMEXMgmtCapability are read on a GPU node for device numbers.
	ProcDevices        string
	IMEXMgmtCapability string

	// NvidiaDriverRoot is the host's NVIDIA driver root, as the container runtime sees it: the
	// host paths of the daemon claims' CDI mounts of nvidia-imex, nvidia-imex-ctl and
	// libnvidia-ml.so.1 start with it. Empty: daemon claims get no driver files (for tests
	// that prepare no daemon; the command's default is devices.DefaultNvidiaDriverRoot).
	NvidiaDriverRoot string
	// ContainerDriverRoot is where the plugin reads NvidiaDriverRoot (its mount point in the
	// plugin's pod); empty: NvidiaDriverRoot.
	ContainerDriverRoot string
	// DevRoot is where the plugin reads the host's /dev, for /dev/nvidiactl when the driver
	// root holds no device nodes (a driver installed on the host); empty: only the root's.
	DevRoot string

	// NumChannels is how many channel devices are published (at most devices.MaxChannels).
	NumChannels int
	// ControlPlaneID is published in every device's controlPlane attribute ("" legacy plane);
	// it must pass plane.ValidateID. It also scopes the cache to the plane's ComputeDomains.
	ControlPlaneID string
	// Gates are the feature gates; every gate at its default when nil.
	Gates featuregate.FeatureGate
	// CliqueNodeLabel keeps the node's nvidia.com/gpu.clique label equal to its clique.
	CliqueNodeLabel bool
	// CliqueRefreshPeriod is how often the clique is discovered again.
	CliqueRefreshPeriod time.Duration
	// StaleSweepInterval is how often claims whose ResourceClaim is gone and CDI specs of
	// unknown claims are removed (claims.State.RunStaleSweeps); DefaultStaleSweepInterval when zero, never when
	// negative.
	StaleSweepInterval time.Duration
	// ReadyWaitTimeout bounds how long one prepare call waits for the node's daemon to be Ready
	// before it returns a retryable error.
	ReadyWaitTimeout time.Duration
	// StatusFallbackAfter is how long a node of a clique waits for its clique object before it
	// also reads the domain's status.nodes (a controller with ComputeDomainCliques off while
	// this plugin's gate is on), then at most once per StatusFallbackAfter/4; zero:
	// DefaultStatusFallbackAfter. Only with the gate on, daemons run by cdplane.
	StatusFallbackAfter time.Duration
	// IMEXMode is who runs IMEX on the node: cdplane's daemons (driverManaged, the default) or
	// the administrator's host service (hostManaged: no daemon device is published, a daemon
	// claim is refused, and a channel prepare checks the host daemon instead of waiting for a
	// daemon). hostManaged requires the HostManagedIMEXDaemon gate.
	IMEXMode features.IMEXMode
	// HostIMEXSocketPath is the host IMEX command socket, below the driver root, that
	// nvidia-imex-ctl queries in hostManaged mode; default DefaultHostIMEXSocketPath.
	HostIMEXSocketPath string
	// PodName and PodUID name the plugin's own pod, which the events about the node are
	// regarding (see nodeEvents); empty: no events.
	PodName string
	PodUID  types.UID
	// HealthAddress is the TCP address (host:port; port 0: any free one) of the gRPC health
	// service (grpc.health.v1) the kubelet's probes ask: SERVING while the registration and DRA
	// sockets answer (healthChecker); empty: none.
	HealthAddress string
	// MetricsAddress is the TCP address of the Prometheus metrics endpoint (MetricsPath);
	// empty: none.
	MetricsAddress string
}

func (o *Options) defaults() error {
	if o.NodeName == "" || o.DriverNamespace == "" || o.Config == nil || o.Discoverer == nil {
		return errors.New("node name, driver namespace, API config and clique discoverer are required")
	}
	if o.StateDir == "" {
		return errors.New("a state directory is required")
	}
	if err := plane.ValidateID(o.ControlPlaneID); err != nil {
		return err
	}
	if o.NumChannels < 1 || o.NumChannels > devices.MaxChannels {
		return fmt.Errorf("number of channels %d: want 1 to %d", o.NumChannels, devices.MaxChannels)
	}
	set := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	set(&o.RegistrarDir, DefaultRegistrarDir)
	set(&o.PluginDataDir, DefaultPluginDataDir)
	set(&o.CDIRoot, DefaultCDIRoot)
	set(&o.ProcDevices, devices.DefaultProcDevices)
	set(&o.IMEXMgmtCapability, devices.DefaultIMEXMgmtCapability)
	set(&o.ContainerDriverRoot, o.NvidiaDriverRoot)
	set(&o.HostIMEXSocketPath, DefaultHostIMEXSocketPath)
	if o.Gates == nil {
		o.Gates = features.NewGates()
	}
	mode, err := features.ParseIMEXMode(string(o.IMEXMode), o.Gates)
	if err != nil {
		return err
	}
	o.IMEXMode = mode
	if mode == features.IMEXHostManaged && o.NvidiaDriverRoot == "" {
		return errors.New("--imex-mode=hostManaged needs the NVIDIA driver root, where nvidia-imex-ctl and the host IMEX socket are")
	}
	if o.ReadHostFile == nil {
		o.ReadHostFile = os.ReadFile
	}
	if o.CliqueRefreshPeriod <= 0 {
		o.CliqueRefreshPeriod = DefaultCliqueRefreshPeriod
	}
	if o.ReadyWaitTimeout <= 0 {
		o.ReadyWaitTimeout = DefaultReadyWaitTimeout
	}
	if o.StatusFallbackAfter <= 0 {
		o.StatusFallbackAfter = DefaultStatusFallbackAfter
	}
	if o.StaleSweepInterval == 0 {
		o.StaleSweepInterval = DefaultStaleSweepInterval
	}
	return nil
}

// Driver is the compute-domain.nvidia.com kubelet plugin of one node.
type Driver struct {
	opts Options
	api  client.Client // uncached: writes and fresh reads
	// claims prepares and unprepares the node's claims.
	claims *claims.State
	clique *devices.CliqueTracker
	label  claims.NodeLabeler
	helper *draplugin.Helper
	events *nodeEvents
	// podEvents posts on the pods of claims that fail for a reason their author can fix.
	podEvents  *podEvents
	stopEvents func()
	// endpoints are the health and metrics endpoints; metrics records the claims' prepares.
	endpoints *endpoints.Set
	metrics   *claimMetrics
	// publisher publishes the node's devices, or none while it cannot serve.
	publisher *devices.Publisher

	cancel context.CancelCauseFunc
	done   chan struct{}
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error
}

var _ draplugin.DRAPlugin = (*Driver)(nil)

// errStopped is the cause of a plugin stopped by Stop.
var errStopped = errors.New("kubelet plugin stopped")

func (d *Driver) cliqueChanged(ctx context.Context) func(string) {
	return func(id string) {
		if !d.opts.CliqueNodeLabel {
			return
		}
		if err := d.label.SetClique(ctx, id); err != nil {
			klog.FromContext(ctx).Error(err, "Labelling the node with its clique failed", "cliqueID", id)
		}
	}
}

// Stop stops serving and waits for the background work to end.
func (d *Driver) Stop() {
	if d == nil {
		return
	}
	d.endpoints.Stop()
	d.helper.Stop()
	d.cancel(errStopped)
	d.wg.Wait()
	if d.stopEvents != nil {
		d.stopEvents()
	}
	d.metrics.forget()
}

// stopping reports whether the plugin is stopping or has stopped.
func (d *Driver) stopping() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// HealthAddress is the address the health service listens on, "" when it is off.
func (d *Driver) HealthAddress() string { return d.endpoints.HealthAddress() }

// MetricsAddress is the address the metrics endpoint listens on, "" when it is off.
func (d *Driver) MetricsAddress() string { return d.endpoints.MetricsAddress() }

// checkDriverRoot looks, at start, for what daemon containers will need from the driver root
// (host-managed: whether the host IMEX answers READY), so that a node where every claim would
// fail says so before the first one does: in its log and in an event. Nothing to check without
// a driver root or NVML.
func (d *Driver) checkDriverRoot(ctx context.Context) {
	if d.opts.NvidiaDriverRoot == "" || !d.clique.NVMLAvailable() {
		return
	}
	if d.opts.IMEXMode == features.IMEXHostManaged {
		h := devices.HostIMEX{Root: d.driverRoot(), Socket: d.opts.HostIMEXSocketPath}
		if err := h.Check(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Channel claims on this node will be refused until the host IMEX is READY")
			d.events.Post(ctx, corev1.EventTypeWarning, devices.ReasonHostIMEXNotReady, "CheckHostIMEX",
				"channel claims on node %s are refused until its host IMEX is ready: %v", d.opts.NodeName, err)
		}
		return
	}
	if err := devices.CheckIMEXNames(d.opts.Gates, d.opts.ReadHostFile, d.opts.NodeName); err != nil {
		klog.FromContext(ctx).Error(err, "Daemon claims on this node will be refused")
		d.events.Post(ctx, corev1.EventTypeWarning, devices.ReasonDriverTooOld, "CheckDriverVersion",
			"daemon claims on node %s will be refused: %v", d.opts.NodeName, err)
	}
	f, err := d.driverRoot().Locate()
	reason := devices.ReasonDriverRootIncomplete
	if err == nil {
		kernel, _ := d.opts.ReadHostFile(devices.DriverVersionFile)
		err, reason = d.driverRoot().CheckVersion(f, kernel), devices.ReasonDriverRootMismatch
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Daemon claims on this node will fail until the driver root is fixed")
		d.events.Post(ctx, corev1.EventTypeWarning, reason, "CheckDriverRoot",
			"daemon claims on node %s will fail: %v", d.opts.NodeName, err)
	}
}

// Done is closed when the plugin stops, by Stop, its context, or a fatal error.
func (d *Driver) Done() <-chan struct{} { return d.done }

// Err is the fatal error that stopped the plugin, nil when it was stopped on purpose.
func (d *Driver) Err() error {
	d.errMu.Lock()
	defer d.errMu.Unlock()
	return d.err
}

func (d *Driver) setErr(cause error) {
	d.errMu.Lock()
	defer d.errMu.Unlock()
	if cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, errStopped) {
		d.err = cause
	}
}

// Checkpoint returns a copy of the claims the plugin knows.
func (d *Driver) Checkpoint() map[types.UID]checkpoint.ClaimEntry { return d.claims.Snapshot() }

// HandleError is called for background errors of the DRA helper (ResourceSlice publishing,
// gRPC servers). Recoverable ones are logged; others stop the plugin.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
	if !errors.Is(err, draplugin.ErrRecoverable) {
		d.cancel(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus is not supported: the driver reports no device health.
func (d *Driver) WatchHealthStatus(context.Context, chan<- draplugin.DeviceHealthReport) error {
	return draplugin.ErrHealthNotSupported
}

// claimsConfig is what the claims' state needs of the options.
func (d *Driver) claimsConfig() claims.Config {
	return claims.Config{NodeName: d.opts.NodeName, DriverNamespace: d.opts.DriverNamespace, StateDir: d.opts.StateDir, CDIRoot: d.opts.CDIRoot,
		NvidiaDriverRoot: d.opts.NvidiaDriverRoot, ContainerDriverRoot: d.opts.ContainerDriverRoot, DevRoot: d.opts.DevRoot,
		ReadHostFile: d.opts.ReadHostFile, Gates: d.opts.Gates, IMEXMode: d.opts.IMEXMode, HostIMEXSocketPath: d.opts.HostIMEXSocketPath}
}

// driverRoot is the host driver's root of the options.
func (d *Driver) driverRoot() devices.DriverRoot { return d.claimsConfig().DriverRoot() }
