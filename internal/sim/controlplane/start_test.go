package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestStartRestartStop starts a whole control plane as `sim up` does (every controller, the
// scheduler, Node and RBAC authorization) with cdplane's CRDs, then checks what its callers
// rely on: the administrator and a certificate user authenticate, RBAC applies to the user,
// a restarted kube-apiserver serves again, and Stop leaves no process behind. It needs the
// binaries of hack/k8s-bins.sh in $CDPLANE_K8S_BINS.
func TestStartRestartStop(t *testing.T) {
	binDir := os.Getenv(BinDirEnv)
	if binDir == "" {
		t.Skipf("$%s is not set: run with %s=$(hack/k8s-bins.sh | tail -n1)", BinDirEnv, BinDirEnv)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var started []Process
	cp, err := Start(ctx, Options{Dir: t.TempDir(), BinDir: binDir, ControllerManager: true, Scheduler: true, InstallCRDs: true,
		Started: func(p Process) { started = append(started, p) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop(15 * time.Second) })
	var names []string
	for _, p := range cp.Processes {
		names = append(names, p.Name)
		if !p.Attached {
			t.Errorf("%s started detached", p.Name)
		}
	}
	if len(started) != 4 || len(cp.Processes) != 4 {
		t.Fatalf("started %d processes, recorded %v", len(started), names)
	}
	for _, p := range cp.Processes {
		if p.StartTime == 0 {
			t.Errorf("%s recorded without its start time", p.Name)
		}
	}
	// etcd authenticates no client: only its owner may reach it, on Unix sockets in a 0700
	// directory, and on no TCP port.
	etcd := cp.Processes[0]
	if ls, err := tcpListeners(etcd.PID); err != nil || len(ls) > 0 {
		t.Errorf("etcd listens on TCP %v (%v), want none", ls, err)
	}
	if ls, err := tcpListeners(cp.Processes[1].PID); err != nil || len(ls) == 0 {
		t.Errorf("kube-apiserver listens on TCP %v (%v): the check of etcd's listeners sees nothing", ls, err)
	}
	if fi, err := os.Stat(etcd.Dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("etcd's socket directory %s: %v, %v; want mode 0700", etcd.Dir, fi, err)
	}
	// The apiserver answers no anonymous request, not even its health.
	for _, path := range []string{"/readyz", "/version", "/api/v1/namespaces"} {
		if code := anonymousStatus(t, cp, path); code != http.StatusUnauthorized {
			t.Errorf("an anonymous GET %s got %d, want 401", path, code)
		}
	}

	admin, err := cp.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	adminCS := kubernetes.NewForConfigOrDie(admin)
	if _, err := adminCS.Discovery().ServerResourcesForGroupVersion("resource.nvidia.com/v1beta1"); err != nil {
		t.Errorf("cdplane's CRDs are not served: %v", err)
	}
	user, err := cp.UserConfig("someone", "some-group")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.NewForConfigOrDie(user).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("a user without RBAC bindings listed namespaces: %v", err)
	}
	// kube-controller-manager runs: it creates each namespace's default ServiceAccount.
	ns, err := adminCS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cp-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, func(ctx context.Context) (bool, error) {
		_, err := adminCS.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Errorf("no default ServiceAccount: %v", err)
	}
	m, err := ReadMetrics(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("apiserver_request_total", map[string]string{"verb": "POST", "resource": "namespaces", "code": "201"}); got < 1 {
		t.Errorf("the apiserver's metrics count %v namespaces created, want at least 1", got)
	}
	// The scheduler's metrics are read as the administrator, its memory from /proc.
	sched := cp.Processes[3]
	cm, err := NewComponentMetrics(admin, sched)
	if err != nil {
		t.Fatal(err)
	}
	if sm, err := cm.Read(ctx); err != nil || sm.Sum("go_memstats_heap_inuse_bytes", nil) <= 0 {
		t.Errorf("the scheduler's metrics: %v, heap in use %v", err, sm.Sum("go_memstats_heap_inuse_bytes", nil))
	}
	if rss, err := ResidentMemory(sched.PID); err != nil || rss < 1<<20 {
		t.Errorf("the scheduler's resident memory: %d, %v", rss, err)
	}

	api := cp.Processes[1]
	np, err := Restart(api, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cp.Processes[1] = np
	if Alive(api) || !Alive(np) {
		t.Errorf("after Restart the old kube-apiserver is alive: %v, the new one: %v", Alive(api), Alive(np))
	}
	if err := poll(ctx, func(ctx context.Context) (bool, error) { return answers(ctx, admin), nil }); err != nil {
		t.Errorf("the restarted kube-apiserver does not serve: %v", err)
	}

	if err := cp.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, p := range cp.Processes {
		if Alive(p) {
			t.Errorf("%s (pid %d) runs after Stop", p.Name, p.PID)
		}
	}
}

// tcpListeners returns the local addresses (hex, as /proc/net/tcp writes them) of the TCP
// sockets pid listens on.
func tcpListeners(pid int) ([]string, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) > 9 && f[3] == "0A" && inodes[f[9]] {
				out = append(out, f[1])
			}
		}
	}
	return out, nil
}

// anonymousStatus is the status of a GET of path without credentials (the cluster CA trusted).
func anonymousStatus(t *testing.T, cp *ControlPlane, path string) int {
	t.Helper()
	caPEM, err := os.ReadFile(cp.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := c.Get(cp.APIServerURL + path)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func poll(ctx context.Context, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, cond)
}

func answers(ctx context.Context, cfg *rest.Config) bool {
	_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
	return err == nil
}
