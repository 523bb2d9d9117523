// Package cluster starts a real Kubernetes control plane for tests: etcd and kube-apiserver
// (through controller-runtime's envtest), and on request kube-controller-manager and
// kube-scheduler, all built from the Kubernetes Go modules by hack/k8s-bins.sh. It installs the
// project's CRDs and gives each test its own namespace.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cdv1beta1 "cdplane/api/v1beta1"
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
	// Dir holds logs and kubeconfigs of the processes started here.
	Dir string

	env   *envtest.Environment
	procs []*process
	mu    sync.Mutex
	// userMu serialises AddUser: envtest's certificate authority is not safe for concurrent use.
	userMu sync.Mutex
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
	root, err := RepoRoot()
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

	etcdLog, apiLog := filepath.Join(dir, "etcd.log"), filepath.Join(dir, "kube-apiserver.log")
	etcdOut, err := os.Create(etcdLog)
	if err != nil {
		return nil, fmt.Errorf("creating etcd log: %w", err)
	}
	apiOut, err := os.Create(apiLog)
	if err != nil {
		return nil, fmt.Errorf("creating kube-apiserver log: %w", err)
	}
	cp := envtest.ControlPlane{
		Etcd:      &envtest.Etcd{Out: etcdOut, Err: etcdOut, StartTimeout: 60 * time.Second, StopTimeout: 15 * time.Second},
		APIServer: &envtest.APIServer{Out: apiOut, Err: apiOut, StartTimeout: 90 * time.Second, StopTimeout: 15 * time.Second},
	}
	args := cp.APIServer.Configure()
	for name, values := range opts.APIServerArgs {
		args.Set(name, values...)
	}
	c.env = &envtest.Environment{
		ControlPlane:          cp,
		BinaryAssetsDirectory: binDir,
		CRDDirectoryPaths:     []string{filepath.Join(root, "deployments", "helm", "cdplane-prerequisites", "templates", "crds")},
		ErrorIfCRDPathMissing: true,
		Scheme:                c.Scheme,
	}
	if opts.NoCRDs {
		c.env.CRDDirectoryPaths = nil
	}
	cfg, err := c.env.Start()
	if err != nil {
		return nil, startError(err, map[string]string{"etcd": etcdLog, "kube-apiserver": apiLog})
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.Config = cfg
	if c.Client, err = client.New(cfg, client.Options{Scheme: c.Scheme}); err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}

	if opts.ControllerManager {
		controllers := opts.Controllers
		if len(controllers) == 0 {
			controllers = []string{"garbagecollector", "daemonset"}
		}
		if err := c.startComponent(ctx, "kube-controller-manager",
			"--controllers="+strings.Join(controllers, ","),
			"--leader-elect=false",
			"--use-service-account-credentials=false",
			"--concurrent-gc-syncs=5",
		); err != nil {
			return nil, err
		}
	}
	if opts.Scheduler {
		if err := c.startComponent(ctx, "kube-scheduler", "--leader-elect=false"); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func startError(err error, logs map[string]string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "starting the control plane: %v", err)
	failed := ""
	switch msg := err.Error(); {
	case strings.Contains(msg, "etcd"):
		failed = "etcd"
	case strings.Contains(msg, "kube-apiserver") || strings.Contains(msg, "apiserver"):
		failed = "kube-apiserver"
	}
	for name, path := range logs {
		if failed != "" && name != failed {
			continue
		}
		fmt.Fprintf(&b, "\n--- %s failed; last lines of %s:\n%s", name, path, Tail(path, 30))
	}
	return errors.New(b.String())
}

// Tail returns the last n lines of a file, or a note saying why it could not be read.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// AdminKubeconfig writes a kubeconfig for a user in group system:masters and returns its path.
func (c *Cluster) AdminKubeconfig(name string) (string, error) {
	c.userMu.Lock()
	defer c.userMu.Unlock()
	user, err := c.env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", name, err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig for %s: %w", name, err)
	}
	path := filepath.Join(c.Dir, name+".kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("writing kubeconfig for %s: %w", name, err)
	}
	return path, nil
}

// UserConfig returns a rest.Config authenticating as the given user and groups.
func (c *Cluster) UserConfig(name string, groups ...string) (*rest.Config, error) {
	c.userMu.Lock()
	defer c.userMu.Unlock()
	user, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	return user.Config(), nil
}

// Stop stops kube-scheduler and kube-controller-manager, then kube-apiserver, then etcd (in
// that order: an apiserver whose etcd went first can hang in shutdown), killing any that do not
// stop in time, and removes the cluster directory.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping kube-apiserver and etcd: %w", err))
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
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("locating the cdplane module: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("locating the cdplane module: not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// BinDir returns the directory of the control-plane binaries: $CDPLANE_K8S_BINS when set,
// otherwise the output of hack/k8s-bins.sh (which builds them on first use).
func BinDir(ctx context.Context) (string, error) {
	if dir := os.Getenv("CDPLANE_K8S_BINS"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "k8s-bins.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building the control-plane binaries (hack/k8s-bins.sh): %w\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}
