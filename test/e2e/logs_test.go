package e2e

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/plane"
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
