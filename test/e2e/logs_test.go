package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/lifecycle"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
	"cdplane/internal/version"
)

// TestComponentsLogVersionAndConfigAtStart: read through the apiserver as `kubectl logs` does,
// every controller and kubelet-plugin pod of a plane logs, at the chart's default verbosity, its
// version and its full effective configuration when it starts — the plane's id among its flags.
func TestComponentsLogVersionAndConfigAtStart(t *testing.T) {
	e2eOnly(t)
	waitPlanesIdle(t, planeA)
	driverNS := plane.Name(planeA, plane.DriverNamespaceLegacyName)
	for component, start := range map[string]string{
		"cdplane-controller":     `"Starting cdplane-controller" version="` + version.Version + `"`,
		"cdplane-kubelet-plugin": `"Starting cdplane-kubelet-plugin" version="` + version.Version + `"`,
	} {
		pods := &corev1.PodList{}
		must(t, c.List(ctx(), pods, client.InNamespace(driverNS), client.MatchingLabels{"app.kubernetes.io/name": component}))
		if len(pods.Items) == 0 {
			t.Fatalf("no %s pods in %s", component, driverNS)
		}
		for _, p := range pods.Items {
			raw, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx())
			must(t, err)
			var line string
			for l := range strings.SplitSeq(string(raw), "\n") {
				if strings.Contains(l, start) {
					line = l
					break
				}
			}
			if line == "" {
				t.Errorf("pod %s: no line with %s in its log", p.Name, start)
				continue
			}
			for _, want := range []string{`"control-plane-id":"` + planeA + `"`, `"feature-gates":`, `"v":"`} {
				if !strings.Contains(line, want) {
					t.Errorf("pod %s: start line lacks %s: %s", p.Name, want, line)
				}
			}
		}
	}
}

// TestLogLevelsHold: the documented verbosity levels, read through the apiserver. At the chart's
// default (1) the leading controller logs its writes ("Wrote status") but neither client-go's
// leader-election detail (4: the standby's "Failed to acquire lease") nor its requests (6:
// "Response" verb=… status=…); at 4 the standby logs its tries and still no request lines
// appear; at 6 the request lines do. The plane is set back to the sim's values afterwards.
func TestLogLevelsHold(t *testing.T) {
	e2eOnly(t)
	const id = planeB
	waitPlanesIdle(t, id)
	driverNS := plane.Name(id, plane.DriverNamespaceLegacyName)
	m, err := lifecycle.New(lifecycle.Options{Getter: lifecycle.KubeconfigGetter(simState.ControlPlane.Kubeconfig, ""), Timeout: 3 * time.Minute, Wait: true})
	must(t, err)
	t.Cleanup(func() {
		if err := m.ApplyPlane(ctx(), id, simState.PlaneValues(), lifecycle.ResetValues); err != nil {
			t.Errorf("restoring plane %s: %v", id, err)
		}
		waitPlaneVerbosity(t, id, "1")
	})
	ns := namespace(t, id)
	cd := computeDomain(t, ns, "cd", 1, "")
	workerPod(t, ns, "w0", "cd", planeNodes(id, rackNumber(t, planeRacks(t, id)[0]))[0])
	waitStatus(t, cd, cdv1beta1.StatusReady, 2*time.Minute)

	const write, lease, request = `"Wrote status"`, `"Failed to acquire lease"`, `"Response" verb=`
	check := func(level string, want map[string]bool) {
		t.Helper()
		testutil.Eventually(t, time.Minute, "controller logs at verbosity "+level, func() (bool, error) {
			leader, standby, err := leaderAndStandby(driverNS, plane.Name(id, "cdplane-controller"))
			if err != nil {
				return false, err
			}
			logs := map[string]string{"leader": podLog(t, leader), "standby": podLog(t, standby)}
			for key, present := range want {
				who, line, _ := strings.Cut(key, ":")
				if strings.Contains(logs[who], line) != present {
					return false, fmt.Errorf("at -v=%s the %s's log has %s: %v, want %v", level, who, line, !present, present)
				}
			}
			return true, nil
		})
	}
	check("1", map[string]bool{"leader:" + write: true, "leader:" + request: false, "standby:" + lease: false, "standby:" + request: false})
	for _, level := range []string{"4", "6"} {
		vals := simState.PlaneValues()
		vals["logVerbosity"] = level
		must(t, m.ApplyPlane(ctx(), id, vals, lifecycle.ResetValues))
		waitPlaneVerbosity(t, id, level)
		// A write for the new leader to log: the domain's status follows its second node.
		must(t, c.Delete(ctx(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w0"}}))
		testutil.Eventually(t, 2*time.Minute, "w0 gone", func() (bool, error) {
			err := c.Get(ctx(), client.ObjectKey{Namespace: ns, Name: "w0"}, &corev1.Pod{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		workerPod(t, ns, "w0", "cd", planeNodes(id, rackNumber(t, planeRacks(t, id)[0]))[0])
		waitStatus(t, cd, cdv1beta1.StatusReady, 2*time.Minute)
		check(level, map[string]bool{"leader:" + write: true, "standby:" + lease: true, "leader:" + request: level == "6"})
	}
}

// waitPlaneVerbosity waits until plane id's controller and plugin pods run with --v=level.
func waitPlaneVerbosity(t *testing.T, id, level string) {
	t.Helper()
	waitPlaneSpec(t, id, "--v="+level, func(_ string, spec corev1.PodSpec) error {
		if !slices.Contains(spec.Containers[0].Args, "--v="+level) {
			return fmt.Errorf("args %q", spec.Containers[0].Args)
		}
		return nil
	})
}

// leaderAndStandby returns the controller pod the lease names and another Ready one.
func leaderAndStandby(driverNS, leaseName string) (leader, standby *corev1.Pod, err error) {
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx(), client.ObjectKey{Namespace: driverNS, Name: leaseName}, lease); err != nil {
		return nil, nil, err
	}
	pods, err := controllerPods(driverNS)
	if err != nil {
		return nil, nil, err
	}
	for i := range pods {
		p := &pods[i]
		switch {
		case !podutils.IsPodReady(p):
		case p.Name == ptrValue(lease.Spec.HolderIdentity):
			leader = p
		default:
			standby = p
		}
	}
	if leader == nil || standby == nil {
		return nil, nil, fmt.Errorf("no Ready leader and standby among %d controller pods (lease holder %q)", len(pods), ptrValue(lease.Spec.HolderIdentity))
	}
	return leader, standby, nil
}

// podLog is a pod's log, as `kubectl logs` reads it.
func podLog(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	raw, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx())
	must(t, err)
	return string(raw)
}
