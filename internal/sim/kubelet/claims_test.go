package kubelet

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"cdplane/internal/testutil"
)

func TestPodClaimNames(t *testing.T) {
	pod := func() *testutil.PodWrapper { return testutil.MakePod("p", "ns") }
	for name, tc := range map[string]struct {
		pod         *corev1.Pod
		want        map[string]string
		wantPending bool
	}{
		"by name": {
			pod:  pod().Claim("a", "claim-a").Obj(),
			want: map[string]string{"a": "claim-a"},
		},
		"template, recorded": {
			pod:  pod().ClaimFromTemplate("t", "tmpl").ClaimStatus("t", "pod-t-x").Obj(),
			want: map[string]string{"t": "pod-t-x"},
		},
		"template, no claim needed": {
			pod:  pod().ClaimFromTemplate("t", "tmpl").ClaimStatus("t", "").Obj(),
			want: map[string]string{},
		},
		"template, not yet": {
			pod:         pod().ClaimFromTemplate("t", "tmpl").Obj(),
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
