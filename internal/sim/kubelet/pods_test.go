package kubelet

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"cdplane/internal/testutil"
)

// The pod informer keeps a pod of this kubelet's nodes whole but for its managed fields, and of
// a pod on another process's node only what names it: the cache of each of a sim's kubelet
// processes holds its own share of the pods.
func TestKeepOfPod(t *testing.T) {
	k, err := New(Config{RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"}, StateDir: t.TempDir(),
		Nodes: []NodeSpec{{Name: "mine", InternalIP: "127.10.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	full := func(node string) *corev1.Pod {
		p := testutil.MakePod("p", "ns").UID("u1").NodeName(node).Created(time.Unix(100, 0)).
			Label("app", "x").Phase(corev1.PodRunning).Obj()
		p.ResourceVersion = "42"
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
		return p
	}
	cases := map[string]struct {
		in   *corev1.Pod
		want *corev1.Pod
	}{
		"a pod of mine loses its managed fields only": {
			in: full("mine"),
			want: func() *corev1.Pod {
				p := full("mine")
				p.ManagedFields = nil
				return p
			}(),
		},
		"a pod of another node keeps what names it": {
			in: full("theirs"),
			want: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: "42"},
				Spec:       corev1.PodSpec{NodeName: "theirs"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := k.keepOfPod(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
		})
	}
}
