// Package lifecycle installs, upgrades and removes cdplane's Helm releases — the shared
// prerequisites and one release per control plane — through the Helm Go SDK, so they are
// ordinary Helm releases (`helm list` shows them), with the checks Helm does not make: a plane
// touches only namespaces and cluster-scoped objects it owns, checked before the first change and
// again right before each delete; destroy refuses while the plane has ComputeDomains unless told
// to delete them; the prerequisites go only when no plane is left.
package lifecycle

import (
	"fmt"
	"io"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	charts "cdplane/deployments/helm"
	"cdplane/internal/plane"
	"cdplane/internal/scheme"
)

const (
	// PrerequisitesRelease is the release name of the shared prerequisites.
	PrerequisitesRelease = charts.Prerequisites
	// PrerequisitesNamespace holds the prerequisites' release record (and its ConfigMap).
	PrerequisitesNamespace = "kube-system"
	// partOfLabel marks namespaces the cdplane CLI created for a plane.
	partOfLabel = "app.kubernetes.io/part-of"
	partOfValue = "cdplane"
)

// Options configure a Manager.
type Options struct {
	// Getter selects the cluster and how to reach it (the CLI's kubeconfig flags, or
	// KubeconfigGetter); nil: the usual rules ($KUBECONFIG, ~/.kube/config, in-cluster).
	Getter genericclioptions.RESTClientGetter
	// Out receives progress lines (nil: discarded).
	Out io.Writer
	// Timeout bounds each wait (default 5m), and the retries of each request that fails
	// transiently (WithRetries).
	Timeout time.Duration
	// Wait waits for the plane's controller and kubelet plugin to be ready after install or
	// apply (the prerequisites are always waited for).
	Wait bool
	// HelmLog receives Helm's own log (nil: discarded).
	HelmLog io.Writer
	// Poll is how often waits look again (default 1s).
	Poll time.Duration
}

// Manager runs lifecycle commands against one cluster.
type Manager struct {
	opts   Options
	out    io.Writer
	getter *clusterGetter
	cfg    *rest.Config
	c      client.Client
}

// New returns a Manager for the cluster the options select.
func New(opts Options) (*Manager, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	if opts.Poll == 0 {
		opts.Poll = time.Second
	}
	out := syncWriter(opts.Out)
	if opts.Getter == nil {
		opts.Getter = KubeconfigGetter("", "")
	}
	getter := newClusterGetter(opts.Getter, out, opts.Timeout)
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	scheme := scheme.New()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the API client: %w", err)
	}
	return &Manager{opts: opts, out: out, getter: getter, cfg: cfg, c: c}, nil
}

// PlaneRelease returns the release name and namespace of plane id: both the derived name of
// "cdplane" ("cdplane" for the legacy plane).
func PlaneRelease(id string) (name, namespace string) {
	n := plane.Name(id, plane.DriverNamespaceLegacyName)
	return n, n
}
