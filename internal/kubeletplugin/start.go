package kubeletplugin

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	draplugin "k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/features"
	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/claimlock"
	"cdplane/internal/kubeletplugin/claims"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/endpoints"
	"cdplane/internal/kubeletplugin/readiness"
	"cdplane/internal/metrics"
	"cdplane/internal/scheme"
)

// Start discovers the clique, syncs the watch cache, recovers claims left PrepareStarted by a
// previous run, then serves the kubelet (registration and DRA sockets) and publishes the node's
// devices. It returns once the plugin serves; Stop ends it, as does ctx.
func Start(ctx context.Context, opts Options) (_ *Driver, err error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", opts.NodeName))
	if err := makeDirs(opts); err != nil {
		return nil, err
	}
	eps, err := endpoints.Listen(opts.HealthAddress, opts.MetricsAddress)
	if err != nil {
		return nil, err
	}
	d := &Driver{opts: opts, done: make(chan struct{}), endpoints: eps, metrics: newClaimMetrics(metrics.KubeletPlugin, opts.ControlPlaneID)}
	ctx, d.cancel = context.WithCancelCause(ctx)
	defer func() {
		if err != nil {
			d.Stop()
		}
	}()
	scheme := scheme.Shared()
	if err := d.serveEndpoints(ctx); err != nil {
		return nil, err
	}
	kube, err := d.connect(ctx, scheme)
	if err != nil {
		return nil, err
	}
	deps, err := d.openState(ctx)
	if err != nil {
		return nil, err
	}
	if err := d.discoverClique(ctx); err != nil {
		return nil, err
	}
	if err := d.startCache(ctx, scheme, deps); err != nil {
		return nil, err
	}
	if err := d.recoverClaims(ctx); err != nil {
		return nil, err
	}
	if err := d.serveKubelet(ctx, kube); err != nil {
		return nil, err
	}
	if err := d.publishDevices(ctx); err != nil {
		return nil, err
	}
	d.runBackground(ctx)
	klog.FromContext(ctx).Info("Kubelet plugin started", "driver", cdv1beta1.DriverName, "channels", opts.NumChannels,
		"controlPlane", opts.ControlPlaneID, "registrarDir", opts.RegistrarDir, "pluginDataDir", opts.PluginDataDir)
	return d, nil
}

// makeDirs creates the directories the plugin writes to.
func makeDirs(opts Options) error {
	for _, dir := range []string{opts.StateDir, opts.CDIRoot, opts.PluginDataDir, opts.RegistrarDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	return nil
}

// serveEndpoints serves the health and metrics endpoints, and closes Done when ctx ends.
func (d *Driver) serveEndpoints(ctx context.Context) error {
	if err := d.endpoints.Serve(ctx, d.opts.RegistrarDir, d.opts.PluginDataDir, d.stopping); err != nil {
		return err
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		<-ctx.Done()
		d.setErr(context.Cause(ctx))
		close(d.done)
	}()
	return nil
}

// connect makes the API client and clientset, and starts the events about the node and pods.
func (d *Driver) connect(_ context.Context, scheme *runtime.Scheme) (kubernetes.Interface, error) {
	var err error
	if d.api, err = client.New(d.opts.Config, client.Options{Scheme: scheme, Mapper: d.opts.Mapper}); err != nil {
		return nil, fmt.Errorf("creating the API client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(d.opts.Config)
	if err != nil {
		return nil, fmt.Errorf("creating the API clientset: %w", err)
	}
	rec, stopEvents := startEvents(kube, scheme, d.opts.NodeName)
	d.stopEvents = stopEvents
	d.events = newNodeEvents(rec, d.opts.DriverNamespace, d.opts.PodName, d.opts.PodUID, d.opts.NodeName)
	d.podEvents = newPodEvents(rec, clock.RealClock{}, d.opts.NodeName)
	return kube, nil
}

// openState opens what prepares change: the checkpoint, the CDI directory, the device nodes
// they describe and the node's labels. The claims' state is made of them once the watch cache
// it reads is there (startCache).
func (d *Driver) openState(ctx context.Context) (claims.Deps, error) {
	cp, err := checkpoint.NewOpener().Open(ctx, d.opts.StateDir)
	if err != nil {
		return claims.Deps{}, err
	}
	w, err := cdi.NewWriter(d.opts.CDIRoot)
	if err != nil {
		return claims.Deps{}, err
	}
	d.label = claims.NodeLabeler{API: d.api, Node: d.opts.NodeName}
	return claims.Deps{API: d.api, Checkpoint: cp, Specs: w, Label: d.label, Locks: &claimlock.Locks{}, Swept: d.metrics.setPrepared,
		Nodes: devices.Nodes{ProcDevices: d.opts.ProcDevices, MgmtCapFile: d.opts.IMEXMgmtCapability, ReadFile: d.opts.ReadHostFile}}, nil
}

// discoverClique discovers the node's clique and, with CliqueNodeLabel, labels the node with it.
func (d *Driver) discoverClique(ctx context.Context) error {
	d.clique = devices.NewCliqueTracker(d.opts.Discoverer, d.opts.Gates.Enabled(features.CrashOnNVLinkFabricErrors))
	if _, err := d.clique.Refresh(ctx); err != nil {
		return err
	}
	id, cliqueErr := d.clique.Current()
	klog.FromContext(ctx).Info("Discovered the node's clique", "cliqueID", id, "err", cliqueErr)
	if cliqueErr == nil && d.opts.CliqueNodeLabel {
		if err := d.label.SetClique(ctx, id); err != nil {
			return fmt.Errorf("labelling the node with its clique: %w", err)
		}
	}
	return nil
}

// startCache starts the watch cache the readiness check reads (readiness.NewCache) and the
// view of domains on it, makes the claims' state of deps, the view and the clique, and waits
// for the cache to sync.
func (d *Driver) startCache(ctx context.Context, scheme *runtime.Scheme, deps claims.Deps) error {
	cliqueID, _ := d.clique.Current()
	c, err := readiness.NewCache(d.opts.Config, scheme, d.opts.Mapper, d.opts.DriverNamespace, d.opts.ControlPlaneID, cliqueID)
	if err != nil {
		return err
	}
	view := readiness.NewView(c, d.api, d.opts.DriverNamespace, cliqueID,
		d.opts.Gates.Enabled(features.ComputeDomainCliques) && d.opts.IMEXMode == features.IMEXDriverManaged, d.opts.StatusFallbackAfter)
	if err := view.Setup(ctx); err != nil {
		return err
	}
	deps.Domains, deps.Clique = view, d.clique
	d.claims = claims.New(d.claimsConfig(), deps)
	// A deleted domain's config directory goes once nothing here uses it any more.
	inf, err := c.GetInformer(ctx, readiness.DomainMeta())
	if err != nil {
		return fmt.Errorf("informer for ComputeDomains: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(any) {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			if err := d.claims.SweepDomainDirs(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Removing the config directories of deleted ComputeDomains")
			}
		}()
	}}); err != nil {
		return fmt.Errorf("watching ComputeDomain deletions: %w", err)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := c.Start(ctx); err != nil {
			d.cancel(fmt.Errorf("watch cache: %w", err))
		}
	}()
	return readiness.WaitForSync(ctx, c.WaitForCacheSync, readiness.CacheSyncReport)
}

// recoverClaims undoes the claims a previous run left PrepareStarted whose ResourceClaim is gone
// (claims.State.Recover), and removes the config directories of deleted domains.
func (d *Driver) recoverClaims(ctx context.Context) error {
	if err := d.claims.Recover(ctx); err != nil {
		return err
	}
	d.metrics.setPrepared(d.claims.Snapshot())
	if err := d.claims.SweepDomainDirs(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Removing the config directories of deleted ComputeDomains")
	}
	return nil
}

// serveKubelet starts the DRA helper: the registration and DRA sockets the kubelet calls.
func (d *Driver) serveKubelet(ctx context.Context, kube kubernetes.Interface) error {
	var err error
	d.helper, err = draplugin.Start(ctx, d,
		draplugin.DriverName(cdv1beta1.DriverName),
		draplugin.NodeName(d.opts.NodeName),
		draplugin.KubeClient(kube),
		draplugin.RegistrarDirectoryPath(d.opts.RegistrarDir),
		draplugin.PluginDataDirectoryPath(d.opts.PluginDataDir),
		draplugin.RegistrarListener(endpoints.ListenSocket),
		draplugin.PluginListener(endpoints.ListenSocket),
		draplugin.HealthService(false),
		draplugin.Serialize(false),
	)
	if err != nil {
		return fmt.Errorf("starting the kubelet plugin: %w", err)
	}
	return nil
}

// publishDevices publishes the node's devices (none while it cannot serve), checks the driver
// root, and publishes again whenever the reason the node cannot serve changes.
func (d *Driver) publishDevices(ctx context.Context) error {
	d.publisher = &devices.Publisher{Helper: d.helper, Events: d.events, Node: d.opts.NodeName, NumChannels: d.opts.NumChannels,
		ControlPlaneID: d.opts.ControlPlaneID, WithDaemon: d.opts.IMEXMode == features.IMEXDriverManaged}
	block, blockErr := d.clique.Blocked()
	if err := d.publisher.Publish(ctx, block, blockErr); err != nil {
		return err
	}
	d.checkDriverRoot(ctx)
	d.clique.SetOnBlock(func(reason string, err error) {
		if err := d.publisher.Publish(ctx, reason, err); err != nil {
			klog.FromContext(ctx).Error(err, "Publishing the node's devices after its NVML or fabric changed")
		}
	})
	return nil
}

// runBackground starts the clique's rediscovery and the stale sweeps.
func (d *Driver) runBackground(ctx context.Context) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.clique.Run(ctx, d.opts.CliqueRefreshPeriod, d.cliqueChanged(ctx), func(err error) { d.cancel(err) })
	}()
	if d.opts.StaleSweepInterval > 0 {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.claims.RunStaleSweeps(ctx, d.opts.StaleSweepInterval)
		}()
	}
}
