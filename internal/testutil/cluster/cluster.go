// Package cluster is the test harness over the project's control-plane launcher
// (internal/sim/controlplane): it starts etcd and kube-apiserver, and on request
// kube-controller-manager and kube-scheduler, attached to the test binary, installs the
// project's CRDs and gives each test its own namespace.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/sim/controlplane"
)

// Options select the parts of the control plane to start.
type Options struct {
	// ControllerManager starts kube-controller-manager with Controllers.
	ControllerManager bool
	// Controllers run by kube-controller-manager; default: garbage collection and DaemonSets.
	Controllers []string
	// Scheduler starts kube-scheduler.
	Scheduler bool
	// NoCRDs starts without the project's CRDs (tests that install them through the charts).
	NoCRDs bool
	// APIServerArgs are extra kube-apiserver flags, name to values.
	APIServerArgs map[string][]string
}

// stopTimeout is how long each component has to stop before it is killed.
const stopTimeout = 15 * time.Second

// Cluster is a running control plane.
type Cluster struct {
	// Config reaches the apiserver as a cluster administrator.
	Config *rest.Config
	// Client is a controller-runtime client with the project's scheme.
	Client client.Client
	// Scheme knows the built-in types, CRD types and the project's API.
	Scheme *runtime.Scheme
	// BinDir is the directory of the control-plane binaries.
	BinDir string
	// Dir holds the credentials, logs (logs/) and kubeconfigs of the processes started here.
	Dir string

	cp *controlplane.ControlPlane
}

// NewScheme returns a scheme with the built-in types, apiextensions and the project's API.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(s))
	must(apiextensionsv1.AddToScheme(s))
	must(cdv1beta1.AddToScheme(s))
	return s
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// Start brings up the control plane. On failure it stops whatever it started and returns an
// error that names the binary that failed, with the tail of its log.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	binDir, err := BinDir(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cdplane-cluster-")
	if err != nil {
		return nil, fmt.Errorf("creating cluster directory: %w", err)
	}
	c := &Cluster{BinDir: binDir, Dir: dir, Scheme: NewScheme()}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	if c.cp, err = controlplane.Start(ctx, launchOptions(dir, binDir, opts)); err != nil {
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
	cfg, err := c.cp.AdminConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.Config = cfg
	if c.Client, err = client.New(cfg, client.Options{Scheme: c.Scheme}); err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return c, nil
}

// launchOptions are the launcher's options for opts: processes attached to the test binary,
// RBAC alone authorizing (no Node authorizer), fewer garbage-collector workers.
func launchOptions(dir, binDir string, opts Options) controlplane.Options {
	controllers := opts.Controllers
	if len(controllers) == 0 {
		controllers = []string{"garbagecollector", "daemonset"}
	}
	apiArgs := map[string][]string{"authorization-mode": {"RBAC"}}
	for name, values := range opts.APIServerArgs {
		apiArgs[name] = values
	}
	return controlplane.Options{
		Dir:                   dir,
		BinDir:                binDir,
		ControllerManager:     opts.ControllerManager,
		Controllers:           controllers,
		Scheduler:             opts.Scheduler,
		InstallCRDs:           !opts.NoCRDs,
		APIServerArgs:         apiArgs,
		ControllerManagerArgs: map[string][]string{"concurrent-gc-syncs": {"5"}},
	}
}

// Tail returns the last n lines of a file, or a note saying why it could not be read.
func Tail(path string, n int) string { return controlplane.Tail(path, n) }

// AdminKubeconfig writes a kubeconfig for a user in group system:masters and returns its path.
func (c *Cluster) AdminKubeconfig(name string) (string, error) {
	path := filepath.Join(c.Dir, name+".kubeconfig")
	if err := c.cp.WriteUserKubeconfig(path, name, "system:masters"); err != nil {
		return "", err
	}
	return path, nil
}

// UserConfig returns a rest.Config authenticating as the given user and groups.
func (c *Cluster) UserConfig(name string, groups ...string) (*rest.Config, error) {
	return c.cp.UserConfig(name, groups...)
}

// Stop stops kube-scheduler and kube-controller-manager, then kube-apiserver, then etcd (in
// that order: an apiserver whose etcd went first can hang in shutdown), killing any that do not
// stop in time, and removes the cluster directory (kept when $CDPLANE_KEEP_CLUSTER_DIR is set).
func (c *Cluster) Stop() error {
	var errs []error
	if c.cp != nil {
		if err := c.cp.Stop(stopTimeout); err != nil {
			errs = append(errs, fmt.Errorf("stopping the control plane: %w", err))
		}
	}
	if len(errs) == 0 && os.Getenv("CDPLANE_KEEP_CLUSTER_DIR") == "" {
		_ = os.RemoveAll(c.Dir)
	}
	return errors.Join(errs...)
}

// Namespace creates a namespace for one test and deletes it when the test ends.
func (c *Cluster) Namespace(t testingT, labels map[string]string) string {
	t.Helper()
	name := namespaceName(t.Name())
	ns := &corev1.Namespace{}
	ns.GenerateName = name
	ns.Labels = labels
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Client.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Client.Delete(ctx, ns)
	})
	return ns.Name
}

// testingT is the part of testing.TB the cluster uses.
type testingT interface {
	Helper()
	Name() string
	Fatalf(format string, args ...any)
	Cleanup(func())
}

func namespaceName(testName string) string {
	var b bytes.Buffer
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && b.Bytes()[b.Len()-1] != '-':
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return strings.Trim(b.String(), "-") + "-"
}

// RepoRoot returns the directory of the cdplane module, found from the working directory.
func RepoRoot() (string, error) { return controlplane.RepoRoot() }

// BinDir returns the directory of the control-plane binaries: $CDPLANE_K8S_BINS when set,
// otherwise the output of hack/k8s-bins.sh (which builds them on first use).
func BinDir(ctx context.Context) (string, error) { return controlplane.BinDir(ctx) }
