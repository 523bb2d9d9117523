package computedomain

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/membership"
	"cdplane/internal/testutil"
)

func TestPodInfo(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ds := testutil.MakeDaemonSet(cdv1beta1.DaemonSetName(testUID), testDriverNS).UID("ds-uid").Obj()
	dsRef := testutil.ControllerRef("apps/v1", "DaemonSet", ds.Name, ds.UID)
	daemon := func() *testutil.PodWrapper {
		return testutil.MakePod("daemon-x", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).Created(t0).NodeName("n1").OwnedBy(dsRef)
	}
	stranger := func(ref metav1.OwnerReference) *testutil.PodWrapper {
		return testutil.MakePod("daemon-y", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).Created(t0).NodeName("n1").
			Label(cdv1beta1.CliqueIDLabel, "uuid.1").OwnedBy(ref)
	}
	notController := dsRef
	notController.Controller = nil
	cases := map[string]struct {
		pod  *testutil.PodWrapper
		want membership.Pod
	}{
		"labelled, running and ready": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").PodIP("127.0.0.1").Ready(true),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Ready: true, Created: t0, Owned: true},
		},
		"not ready": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").PodIP("127.0.0.1").Ready(false),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Created: t0, Owned: true},
		},
		"IMEX blocked on its node": {
			pod: daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").Label(cdv1beta1.IMEXBlockedLabel, cdv1beta1.IMEXBlockedHostIMEXInUse).PodIP("127.0.0.1").Ready(false),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Created: t0, Owned: true,
				Blocked: cdv1beta1.IMEXBlockedHostIMEXInUse},
		},
		"no fabric: labelled with an empty clique": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "").PodIP("127.0.0.1").Ready(true),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", Labelled: true, Ready: true, Created: t0, Owned: true},
		},
		"not labelled by its daemon yet, no address yet": {
			pod:  daemon(),
			want: membership.Pod{NodeName: "n1", Created: t0, Owned: true},
		},
		"terminating": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").PodIP("127.0.0.1").Ready(true).Terminating(t0.Add(time.Hour)),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Ready: true, Terminating: true, Created: t0, Owned: true},
		},
		"owned by another DaemonSet of the same name (another UID): not the domain's": {
			pod:  stranger(testutil.ControllerRef("apps/v1", "DaemonSet", ds.Name, "other-uid")),
			want: membership.Pod{NodeName: "n1", CliqueID: "uuid.1", Labelled: true, Created: t0},
		},
		"a non-controller owner reference to the DaemonSet: not the domain's": {
			pod:  stranger(notController),
			want: membership.Pod{NodeName: "n1", CliqueID: "uuid.1", Labelled: true, Created: t0},
		},
		"no owner: not the domain's": {
			pod:  testutil.MakePod("daemon-z", testDriverNS).Created(t0).NodeName("n1"),
			want: membership.Pod{NodeName: "n1", Created: t0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, podInfo(tc.pod.Obj(), ds)); diff != "" {
				t.Errorf("podInfo (-want +got):\n%s", diff)
			}
		})
	}
}
