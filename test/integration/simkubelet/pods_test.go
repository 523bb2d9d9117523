package simkubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"cdplane/internal/sim/kubelet"
	"cdplane/internal/testutil"
)

// TestPlainPod: a pod placed by kube-scheduler runs on its simulated node with a loopback
// address; its environment (literals, downward API, ConfigMap and Secret keys, envFrom) and
// paths (volume mounts, args, env) are resolved and remapped; its service account reaches the
// apiserver through the generated kubeconfig; its exec readiness probe gates Ready; the noop
// record is readable with GetLogs through the apiserver; deleting it removes it.
func TestPlainPod(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	ns := testCluster.Namespace(t, nil)
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"color": "blue", "size": "L"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sec"}, Data: map[string][]byte{"password": []byte("hunter2")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runner"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := podOn(ns, "plain", nodeB, "example.com/app:v1")
	pod.Spec.ServiceAccountName = "runner"
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/app"}}},
	}
	fieldRef := func(p string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: p}}
	}
	pod.Spec.Containers[0] = corev1.Container{
		Name: "main", Image: "example.com/app:v1",
		Command: []string{"/app/bin/server"},
		Args:    []string{"--state=/var/lib/app/state", "/data", "$(POD_NAME)"},
		EnvFrom: []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		Env: []corev1.EnvVar{
			{Name: "LITERAL", Value: "x"},
			{Name: "POD_NAME", ValueFrom: fieldRef("metadata.name")},
			{Name: "POD_NAMESPACE", ValueFrom: fieldRef("metadata.namespace")},
			{Name: "NODE_NAME", ValueFrom: fieldRef("spec.nodeName")},
			{Name: "POD_IP", ValueFrom: fieldRef("status.podIP")},
			{Name: "HOST_IP", ValueFrom: fieldRef("status.hostIP")},
			{Name: "SA", ValueFrom: fieldRef("spec.serviceAccountName")},
			{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "color"}}},
			{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "password"}}},
			{Name: "DATA_FILE", Value: "/data/file"},
			{Name: "GREETING", Value: "hello $(POD_NAME)"},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: "/data"},
			{Name: "conf", MountPath: "/etc/app"},
			{Name: "host", MountPath: "/var/lib/app"},
		},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/data/ready"}}},
			PeriodSeconds: 1,
		},
	}
	created := createPod(t, pod)

	got := waitPod(t, ns, pod.Name, 60*time.Second, "pod running", running)
	if got.Spec.NodeName != nodeB {
		t.Fatalf("pod scheduled on %s, want %s", got.Spec.NodeName, nodeB)
	}
	inPodRange(t, got.Status.PodIP)
	if got.Status.HostIP != "127.10.0.2" || len(got.Status.PodIPs) != 1 || got.Status.PodIPs[0].IP != got.Status.PodIP {
		t.Errorf("hostIP %q podIPs %v", got.Status.HostIP, got.Status.PodIPs)
	}
	if podutils.IsPodReady(got) {
		t.Fatal("pod Ready before its readiness probe can pass")
	}

	record := waitLogs(t, ns, pod.Name, "main", func(s string) bool { return strings.Contains(s, "ARGS ") })
	nodeDir := sim.NodeDir(nodeB)
	podDir := filepath.Join(nodeDir, "var/lib/kubelet/pods", string(created.UID))
	dataDir := filepath.Join(podDir, "volumes", "data")
	hostDir := filepath.Join(nodeDir, "var/lib/app")
	saDir := filepath.Join(podDir, "serviceaccount")
	want := map[string]string{
		"ARGS ":               "/app/bin/server --state=" + hostDir + "/state " + dataDir + " plain",
		"ENV LITERAL=":        "x",
		"ENV POD_NAME=":       "plain",
		"ENV POD_NAMESPACE=":  ns,
		"ENV NODE_NAME=":      nodeB,
		"ENV POD_IP=":         got.Status.PodIP,
		"ENV HOST_IP=":        "127.10.0.2",
		"ENV SA=":             "runner",
		"ENV COLOR=":          "blue",
		"ENV CFG_size=":       "L",
		"ENV PASSWORD=":       "hunter2",
		"ENV DATA_FILE=":      dataDir + "/file",
		"ENV GREETING=":       "hello plain",
		"ENV KUBECONFIG=":     filepath.Join(podDir, "kubeconfig"),
		"MOUNT /data ":        dataDir,
		"MOUNT /etc/app ":     filepath.Join(podDir, "volumes", "conf"),
		"MOUNT /var/lib/app ": hostDir,
		"MOUNT " + kubelet.ServiceAccountMountPath + " ": saDir,
	}
	gotFields := map[string]string{}
	for prefix := range want {
		gotFields[prefix], _ = recordField(record, prefix)
	}
	if diff := cmp.Diff(want, gotFields); diff != "" {
		t.Errorf("noop record (-want +got):\n%s\nrecord:\n%s", diff, record)
	}
	if data, err := os.ReadFile(filepath.Join(podDir, "volumes", "conf", "color")); err != nil || string(data) != "blue" {
		t.Errorf("ConfigMap volume file: %q, %v", data, err)
	}
	if data, err := os.ReadFile(filepath.Join(saDir, "namespace")); err != nil || string(data) != ns {
		t.Errorf("service-account namespace file: %q, %v", data, err)
	}

	// The pod's credentials reach the apiserver as its service account.
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(podDir, "kubeconfig"))
	if err != nil {
		t.Fatalf("pod kubeconfig: %v", err)
	}
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self-subject review with the pod's kubeconfig: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":runner"; review.Status.UserInfo.Username != want {
		t.Errorf("pod authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}

	// tailLines is served by the node: the last line of the record is the last mount.
	tail, err := kube.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "main", TailLines: ptr.To(int64(1))}).DoRaw(ctx)
	if err != nil || !strings.HasPrefix(string(tail), "MOUNT ") || strings.Count(string(tail), "\n") != 1 {
		t.Errorf("last log line %q (%v), want one MOUNT line", tail, err)
	}

	// The readiness probe passes once the file exists in the pod's emptyDir.
	if err := os.WriteFile(filepath.Join(dataDir, "ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, pod.Name, 30*time.Second, "pod Ready", func(p *corev1.Pod) error {
		if !podutils.IsPodReady(p) {
			return errors.New("not Ready")
		}
		return nil
	})
	// And fails again once it is gone.
	if err := os.Remove(filepath.Join(dataDir, "ready")); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, pod.Name, 30*time.Second, "pod not Ready", func(p *corev1.Pod) error {
		if podutils.IsPodReady(p) {
			return errors.New("still Ready")
		}
		return nil
	})

	if err := kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, pod.Name, 30*time.Second)
	if _, err := os.Stat(podDir); !os.IsNotExist(err) {
		t.Errorf("pod directory left behind: %v", err)
	}
}

// TestRestartPolicy: a container that exits is restarted or not by the pod's restart policy,
// and the pod's phase follows.
func TestRestartPolicy(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		policy      corev1.RestartPolicy
		annotations map[string]string
		wantPhase   corev1.PodPhase // "" : keeps running, restarting
		wantExit    int32
	}{
		"never, exit 3":      {policy: corev1.RestartPolicyNever, annotations: map[string]string{kubelet.AnnotationExitCode: "3"}, wantPhase: corev1.PodFailed, wantExit: 3},
		"never, run 1s":      {policy: corev1.RestartPolicyNever, annotations: map[string]string{kubelet.AnnotationRunFor: "1s"}, wantPhase: corev1.PodSucceeded},
		"on failure, exit 0": {policy: corev1.RestartPolicyOnFailure, annotations: map[string]string{kubelet.AnnotationExitCode: "0"}, wantPhase: corev1.PodSucceeded},
		"on failure, exit 1": {policy: corev1.RestartPolicyOnFailure, annotations: map[string]string{kubelet.AnnotationExitCode: "1"}, wantExit: 1},
		"always, run 0.5s":   {policy: corev1.RestartPolicyAlways, annotations: map[string]string{kubelet.AnnotationRunFor: "500ms"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns := testCluster.Namespace(t, nil)
			pod := podOn(ns, "restart", nodeA, "example.com/job:v1")
			pod.Annotations = tc.annotations
			pod.Spec.RestartPolicy = tc.policy
			createPod(t, pod)
			if tc.wantPhase != "" {
				got := waitPod(t, ns, pod.Name, 60*time.Second, "pod "+string(tc.wantPhase), func(p *corev1.Pod) error {
					if p.Status.Phase != tc.wantPhase {
						return errors.New("phase")
					}
					return nil
				})
				cs := got.Status.ContainerStatuses
				if len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != tc.wantExit || cs[0].RestartCount != 0 {
					t.Errorf("container status %+v, want terminated with %d and no restart", cs, tc.wantExit)
				}
				return
			}
			defer func() {
				// The previous instance's log is served too.
				prev, err := kube.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "main", Previous: true}).DoRaw(context.Background())
				if err != nil || !strings.HasPrefix(string(prev), "ARGS") {
					t.Errorf("previous log %q (%v), want the noop record", prev, err)
				}
			}()
			waitPod(t, ns, pod.Name, 60*time.Second, "container restarted twice", func(p *corev1.Pod) error {
				cs := p.Status.ContainerStatuses
				if p.Status.Phase != corev1.PodRunning || len(cs) != 1 || cs[0].RestartCount < 2 {
					return errors.New("not restarted twice yet")
				}
				if t := cs[0].LastTerminationState.Terminated; t == nil || t.ExitCode != tc.wantExit {
					return fmt.Errorf("last termination %+v, want exit %d", cs[0].LastTerminationState, tc.wantExit)
				}
				return nil
			})
		})
	}
}

// TestInitContainers: init containers run in order before the containers; a sidecar (an init
// container with restartPolicy Always) keeps running beside them.
func TestInitContainers(t *testing.T) {
	t.Parallel()
	ns := testCluster.Namespace(t, nil)
	pod := podOn(ns, "init", nodeB, "example.com/app:v1")
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "setup", Image: "example.com/setup:v1"},
		{Name: "sidecar", Image: "example.com/proxy:v1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
	}
	createPod(t, pod)
	got := waitPod(t, ns, pod.Name, 60*time.Second, "pod running and ready", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning || !podutils.IsPodReady(p) {
			return errors.New("not running and ready")
		}
		return nil
	})
	init := got.Status.InitContainerStatuses
	if len(init) != 2 || init[0].State.Terminated == nil || init[0].State.Terminated.ExitCode != 0 ||
		init[1].State.Running == nil || !init[1].Ready {
		t.Errorf("init container statuses: %s", containerStates(got))
	}
	if len(got.Status.ContainerStatuses) != 1 || got.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("container statuses: %s", containerStates(got))
	}
	if init[0].State.Terminated.FinishedAt.IsZero() || got.Status.ContainerStatuses[0].State.Running.StartedAt.Before(&init[0].State.Terminated.FinishedAt) {
		t.Errorf("main container started before the init container finished: %+v", got.Status)
	}
}

// sleeperPod runs the sleeper script (a real process) on node A.
func sleeperPod(t *testing.T, ns, name string, grace int64, args ...string) (*corev1.Pod, int) {
	t.Helper()
	pod := podOn(ns, name, nodeA, sleeperImage)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
	pod.Spec.Volumes = []corev1.Volume{{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].Command = []string{"/usr/bin/sleeper", "/run/pid"}
	pod.Spec.Containers[0].Args = args
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "run", MountPath: "/run"}}
	created := createPod(t, pod)
	waitPod(t, ns, name, 60*time.Second, "sleeper running", running)
	pidFile := filepath.Join(sim.NodeDir(nodeA), "var/lib/kubelet/pods", string(created.UID), "volumes/run/pid")
	var pid int
	testutil.Eventually(t, 30*time.Second, "sleeper wrote its pid", func() (bool, error) {
		data, err := os.ReadFile(pidFile)
		if err != nil {
			return false, err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil, err
	})
	// Its log, through the apiserver, shows the remapped argument.
	waitLogs(t, ns, name, "main", func(s string) bool { return strings.Contains(s, "sleeper "+filepath.Dir(pidFile)+"/pid") })
	return created, pid
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestGracefulDeletion: a process that ignores SIGTERM is killed once the grace period is
// over, and only then is the pod removed.
func TestGracefulDeletion(t *testing.T) {
	t.Parallel()
	ns := testCluster.Namespace(t, nil)
	pod, pid := sleeperPod(t, ns, "stubborn", 3, "ignore-term")
	start := time.Now()
	if err := kube.CoreV1().Pods(ns).Delete(ctxFor(t), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, pod.Name, 30*time.Second)
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("pod removed after %s, before its 3s grace period", took)
	}
	if alive(pid) {
		t.Errorf("process %d still alive after the pod was removed", pid)
	}
}

// TestForceDeletionKills: a pod deleted with grace 0 (gone from the API at once) has its
// process killed at once.
func TestForceDeletionKills(t *testing.T) {
	t.Parallel()
	ns := testCluster.Namespace(t, nil)
	pod, pid := sleeperPod(t, ns, "forced", 300)
	if err := kube.CoreV1().Pods(ns).Delete(ctxFor(t), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "process killed", func() (bool, error) {
		return !alive(pid), fmt.Errorf("process %d alive", pid)
	})
}

var _ = context.Background
