package kubelet

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestShouldRestart(t *testing.T) {
	always, onFailure, never := corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever
	cNever := ptr.To(corev1.ContainerRestartPolicyNever)
	cAlways := ptr.To(corev1.ContainerRestartPolicyAlways)
	for name, tc := range map[string]struct {
		pod           corev1.RestartPolicy
		own           *corev1.ContainerRestartPolicy
		init, sidecar bool
		code          int
		want          bool
	}{
		"always, exit 0":             {pod: always, want: true},
		"always, exit 1":             {pod: always, code: 1, want: true},
		"on failure, exit 0":         {pod: onFailure},
		"on failure, exit 1":         {pod: onFailure, code: 1, want: true},
		"never, exit 1":              {pod: never, code: 1},
		"container never overrides":  {pod: always, own: cNever},
		"container always overrides": {pod: never, own: cAlways, want: true},
		"init succeeded":             {pod: always, init: true},
		"init failed, pod always":    {pod: always, init: true, code: 1, want: true},
		"init failed, pod never":     {pod: never, init: true, code: 1},
		"sidecar exits 0, pod never": {pod: never, own: cAlways, init: true, sidecar: true, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := shouldRestart(tc.pod, tc.own, tc.init, tc.sidecar, tc.code); got != tc.want {
				t.Errorf("shouldRestart = %v, want %v", got, tc.want)
			}
		})
	}
}
