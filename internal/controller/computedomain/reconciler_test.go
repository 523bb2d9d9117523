package computedomain

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/controller/membership"
	"cdplane/internal/testutil"
)

func TestPodInfo(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	daemon := func() *testutil.PodWrapper {
		return testutil.MakePod("daemon-x", testDriverNS).Label(cdv1beta1.ComputeDomainLabel, testUID).Created(t0).NodeName("n1")
	}
	cases := map[string]struct {
		pod  *testutil.PodWrapper
		want membership.Pod
	}{
		"labelled, running and ready": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").PodIP("127.0.0.1").Ready(true),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Ready: true, Created: t0},
		},
		"not ready": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").PodIP("127.0.0.1").Ready(false),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Created: t0},
		},
		"no fabric: labelled with an empty clique": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "").PodIP("127.0.0.1").Ready(true),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", Labelled: true, Ready: true, Created: t0},
		},
		"not labelled by its daemon yet, no address yet": {
			pod:  daemon(),
			want: membership.Pod{NodeName: "n1", Created: t0},
		},
		"terminating": {
			pod:  daemon().Label(cdv1beta1.CliqueIDLabel, "uuid.1").PodIP("127.0.0.1").Ready(true).Terminating(t0.Add(time.Hour)),
			want: membership.Pod{NodeName: "n1", IP: "127.0.0.1", CliqueID: "uuid.1", Labelled: true, Ready: true, Terminating: true, Created: t0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, podInfo(tc.pod.Obj())); diff != "" {
				t.Errorf("podInfo (-want +got):\n%s", diff)
			}
		})
	}
}
