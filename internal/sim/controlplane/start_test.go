package controlplane

import (
	"context"
	"os"
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

func poll(ctx context.Context, cond wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, cond)
}

func answers(ctx context.Context, cfg *rest.Config) bool {
	_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
	return err == nil
}
