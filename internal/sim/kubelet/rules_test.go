package kubelet

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"
)

func TestPodPhase(t *testing.T) {
	run := ctrSummary{running: true}
	ok := ctrSummary{terminated: true, finished: true}
	bad := ctrSummary{terminated: true, finished: true, exitCode: 2}
	restarting := ctrSummary{terminated: true, exitCode: 1} // will run again
	waiting := ctrSummary{}
	for name, tc := range map[string]struct {
		initFailed, initDone bool
		ctrs                 []ctrSummary
		want                 corev1.PodPhase
	}{
		"init failed":             {initFailed: true, want: corev1.PodFailed},
		"initializing":            {ctrs: []ctrSummary{run}, want: corev1.PodPending},
		"nothing started yet":     {initDone: true, ctrs: []ctrSummary{waiting, waiting}, want: corev1.PodPending},
		"one running":             {initDone: true, ctrs: []ctrSummary{run, waiting}, want: corev1.PodRunning},
		"one done, one running":   {initDone: true, ctrs: []ctrSummary{ok, run}, want: corev1.PodRunning},
		"restarting":              {initDone: true, ctrs: []ctrSummary{restarting}, want: corev1.PodRunning},
		"all succeeded":           {initDone: true, ctrs: []ctrSummary{ok, ok}, want: corev1.PodSucceeded},
		"one failed":              {initDone: true, ctrs: []ctrSummary{ok, bad}, want: corev1.PodFailed},
		"failed one still to run": {initDone: true, ctrs: []ctrSummary{bad, run}, want: corev1.PodRunning},
	} {
		t.Run(name, func(t *testing.T) {
			if got := podPhase(tc.initFailed, tc.initDone, tc.ctrs); got != tc.want {
				t.Errorf("podPhase = %s, want %s", got, tc.want)
			}
		})
	}
}

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

func TestPodClaimNames(t *testing.T) {
	pod := func(claims []corev1.PodResourceClaim, statuses []corev1.PodResourceClaimStatus) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{ResourceClaims: claims}, Status: corev1.PodStatus{ResourceClaimStatuses: statuses}}
	}
	for name, tc := range map[string]struct {
		pod         *corev1.Pod
		want        map[string]string
		wantPending bool
	}{
		"by name": {
			pod:  pod([]corev1.PodResourceClaim{{Name: "a", ResourceClaimName: ptr.To("claim-a")}}, nil),
			want: map[string]string{"a": "claim-a"},
		},
		"template, recorded": {
			pod: pod([]corev1.PodResourceClaim{{Name: "t", ResourceClaimTemplateName: ptr.To("tmpl")}},
				[]corev1.PodResourceClaimStatus{{Name: "t", ResourceClaimName: ptr.To("pod-t-x")}}),
			want: map[string]string{"t": "pod-t-x"},
		},
		"template, no claim needed": {
			pod: pod([]corev1.PodResourceClaim{{Name: "t", ResourceClaimTemplateName: ptr.To("tmpl")}},
				[]corev1.PodResourceClaimStatus{{Name: "t"}}),
			want: map[string]string{},
		},
		"template, not yet": {
			pod:         pod([]corev1.PodResourceClaim{{Name: "t", ResourceClaimTemplateName: ptr.To("tmpl")}}, nil),
			wantPending: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := podClaimNames(tc.pod)
			if tc.wantPending {
				if err == nil || !strings.Contains(err.Error(), errNotReady.Error()) {
					t.Errorf("error %v, want not ready", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("claim names (-want +got):\n%s", diff)
			}
		})
	}
}

func TestContainerCDIDevices(t *testing.T) {
	claims := []*preparedClaim{
		{podClaim: "gpu", devices: []*drapbv1.Device{
			{RequestNames: []string{"big"}, CdiDeviceIds: []string{"v/c=0", "v/c=common"}},
			{RequestNames: []string{"small/alt"}, CdiDeviceIds: []string{"v/c=1", "v/c=common"}},
		}},
		{podClaim: "imex", devices: []*drapbv1.Device{{RequestNames: []string{"channel"}, CdiDeviceIds: []string{"v/c=ch0"}}}},
	}
	for name, tc := range map[string]struct {
		claims []corev1.ResourceClaim
		want   []string
	}{
		"none":                 {},
		"whole claim, deduped": {claims: []corev1.ResourceClaim{{Name: "gpu"}}, want: []string{"v/c=0", "v/c=common", "v/c=1"}},
		"one request":          {claims: []corev1.ResourceClaim{{Name: "gpu", Request: "big"}}, want: []string{"v/c=0", "v/c=common"}},
		"subrequest":           {claims: []corev1.ResourceClaim{{Name: "gpu", Request: "small"}}, want: []string{"v/c=1", "v/c=common"}},
		"two claims":           {claims: []corev1.ResourceClaim{{Name: "imex"}, {Name: "gpu", Request: "big"}}, want: []string{"v/c=ch0", "v/c=0", "v/c=common"}},
		"unknown claim":        {claims: []corev1.ResourceClaim{{Name: "other"}}},
	} {
		t.Run(name, func(t *testing.T) {
			c := &corev1.Container{Resources: corev1.ResourceRequirements{Claims: tc.claims}}
			if diff := cmp.Diff(tc.want, containerCDIDevices(c, claims)); diff != "" {
				t.Errorf("CDI ids (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTailOffset(t *testing.T) {
	for name, tc := range map[string]struct {
		text string
		n    int64
		want string
	}{
		"empty":                 {text: "", n: 2, want: ""},
		"zero lines":            {text: "a\nb\n", n: 0, want: ""},
		"last two":              {text: "a\nb\nc\n", n: 2, want: "b\nc\n"},
		"more than there are":   {text: "a\nb\n", n: 5, want: "a\nb\n"},
		"no final newline":      {text: "a\nb\nc", n: 1, want: "c"},
		"exactly all":           {text: "a\nb\n", n: 2, want: "a\nb\n"},
		"long lines (chunking)": {text: strings.Repeat("x", 40000) + "\n" + strings.Repeat("y", 70000) + "\n", n: 1, want: strings.Repeat("y", 70000) + "\n"},
	} {
		t.Run(name, func(t *testing.T) {
			r := bytes.NewReader([]byte(tc.text))
			off, err := tailOffset(r, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.text[off:]; got != tc.want {
				t.Errorf("tail %d of %q = %q, want %q", tc.n, tc.text, got, tc.want)
			}
		})
	}
}

func TestImageRepository(t *testing.T) {
	for in, want := range map[string]string{
		"cdplane":                            "cdplane",
		"cdplane:v1":                         "cdplane",
		"registry:5000/cdplane":              "registry:5000/cdplane",
		"registry:5000/cdplane:v1":           "registry:5000/cdplane",
		"ghcr.io/x/cdplane:v1@sha256:abcdef": "ghcr.io/x/cdplane",
		"cdplane@sha256:abcdef":              "cdplane",
	} {
		if got := ImageRepository(in); got != want {
			t.Errorf("ImageRepository(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNoopRecord(t *testing.T) {
	spec := &ContainerSpec{
		Command: []string{"/bin/app"}, Args: []string{"--x=/h/data", "y"},
		Env:     []EnvVar{{Name: "B", Value: "2"}, {Name: "A", Value: "1"}},
		Devices: []Device{{ContainerPath: "/dev/c0", HostPath: "/n/dev/c0"}},
		Mounts:  []Mount{{ContainerPath: "/data", HostPath: "/h/data"}},
	}
	want := "ARGS /bin/app --x=/h/data y\nENV A=1\nENV B=2\nDEVICE /dev/c0 /n/dev/c0\nMOUNT /data /h/data\n"
	if diff := cmp.Diff(want, NoopRecord(spec)); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

func TestNoopBehaviour(t *testing.T) {
	for name, tc := range map[string]struct {
		ann      map[string]string
		init     bool
		wantFor  time.Duration
		wantCode int
		wantErr  bool
	}{
		"until stopped":      {wantFor: -1},
		"init exits at once": {init: true},
		"run for":            {ann: map[string]string{AnnotationRunFor: "20s"}, wantFor: 20 * time.Second},
		"exit code":          {ann: map[string]string{AnnotationExitCode: "3"}, wantCode: 3},
		"both":               {ann: map[string]string{AnnotationExitCode: "1", AnnotationRunFor: "1s"}, wantFor: time.Second, wantCode: 1},
		"init runs for":      {ann: map[string]string{AnnotationRunFor: "2s"}, init: true, wantFor: 2 * time.Second},
		"bad duration":       {ann: map[string]string{AnnotationRunFor: "soon"}, wantErr: true},
		"bad code":           {ann: map[string]string{AnnotationExitCode: "300"}, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			d, code, err := noopBehaviour(tc.ann, tc.init)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (d != tc.wantFor || code != tc.wantCode) {
				t.Errorf("run for %s, exit %d; want %s, %d", d, code, tc.wantFor, tc.wantCode)
			}
		})
	}
}

func TestProbeThresholds(t *testing.T) {
	pr := &corev1.Probe{SuccessThreshold: 2, FailureThreshold: 2}
	var r probeResult
	var got []int
	for _, ok := range []bool{true, true, false, true, false, false, true} {
		got = append(got, r.record(pr, ok))
	}
	if diff := cmp.Diff([]int{0, 1, 0, 0, 0, -1, 0}, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}
