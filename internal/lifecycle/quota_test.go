package lifecycle

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	cdv1beta1 "cdplane/api/v1beta1"
)

func TestQuotaObject(t *testing.T) {
	if q := QuotaObject("a", "team", Quota{}); q != nil {
		t.Errorf("a quota bounding nothing: %+v, want none", q)
	}
	q := QuotaObject("a", "team", Quota{Domains: 3, Channels: 100})
	if q == nil || q.Name != "a-cdplane-quota" || q.Namespace != "team" || q.Labels[cdv1beta1.ControlPlaneLabel] != "a" {
		t.Fatalf("quota: %+v", q)
	}
	for k, want := range map[corev1.ResourceName]int64{
		"count/computedomains.resource.nvidia.com":                                      3,
		"compute-domain-default-channel.nvidia.com.deviceclass.resource.k8s.io/devices": 100,
	} {
		if v, ok := q.Spec.Hard[k]; !ok || v.Value() != want {
			t.Errorf("hard[%s] = %v, want %d", k, v, want)
		}
	}
	if q := QuotaObject("a", "team", Quota{Channels: 5}); len(q.Spec.Hard) != 1 {
		t.Errorf("only channels bounded: %v", q.Spec.Hard)
	}
}
