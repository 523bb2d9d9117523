package computedomain

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/metrics"
	"cdplane/internal/scheme"
)

// TestNoWriteToADomainTheServerSaysIsForeign: before any write to a domain (its finalizer, its
// membership annotation, its status) or any object created for it (claim templates, DaemonSet)
// the controller reads it afresh from the apiserver; when that read says the domain is not this
// plane's (relabelled to another plane, recreated with another UID, gone), the domain gets zero
// writes and nothing is created for it, whatever the cache says, and the refusal is counted. The cache here holds the domain as the plane's; the apiserver (the reader) another
// version of it.
func TestNoWriteToADomainTheServerSaysIsForeign(t *testing.T) {
	moved := func(planeID, to string, taken bool) (cache, server *cdv1beta1.ComputeDomain) {
		cache = unitDomain(planeID, taken)
		server = cache.DeepCopy()
		if to == "" {
			delete(server.Labels, cdv1beta1.ControlPlaneLabel)
		} else {
			server.Labels = map[string]string{cdv1beta1.ControlPlaneLabel: to}
		}
		return cache, server
	}
	type domains struct{ cache, server *cdv1beta1.ComputeDomain }
	cases := map[string]struct {
		planeID string
		domains func() domains
		// refused: the refusal is counted (a domain gone from the server is not a refusal).
		refused bool
		// want are the writes to the domain: none but where the server agrees with the cache
		// (the controls, which show that the pass would write).
		want []apiWrite
	}{
		"control: new, the server agrees": {planeID: "plane-a", want: []apiWrite{
			{"patch", "ComputeDomain", userNS, "cd"}, {"apply/status", "ComputeDomain", userNS, "cd"}},
			domains: func() domains {
				c, s := moved("plane-a", "plane-a", false)
				return domains{c, s}
			}},
		"control: taken, a status due, the server agrees": {planeID: "plane-a", want: []apiWrite{{"apply/status", "ComputeDomain", userNS, "cd"}},
			domains: func() domains {
				c, s := moved("plane-a", "plane-a", true)
				return domains{c, s}
			}},
		"new, relabelled to another plane": {planeID: "plane-a", refused: true, domains: func() domains {
			c, s := moved("plane-a", "plane-b", false)
			return domains{c, s}
		}},
		"taken, a status due, relabelled to another plane": {planeID: "plane-a", refused: true, domains: func() domains {
			c, s := moved("plane-a", "plane-b", true)
			return domains{c, s}
		}},
		"taken, a status due, its plane label removed": {planeID: "plane-a", refused: true, domains: func() domains {
			c, s := moved("plane-a", "", true)
			return domains{c, s}
		}},
		"legacy: new, labelled for a plane since": {planeID: "", refused: true, domains: func() domains {
			c, s := moved("", "plane-b", false)
			return domains{c, s}
		}},
		"legacy: taken, a status due, labelled for a plane since": {planeID: "", refused: true, domains: func() domains {
			c, s := moved("", "plane-b", true)
			return domains{c, s}
		}},
		"taken, a status due, recreated with another UID": {planeID: "plane-a", refused: true, domains: func() domains {
			c, s := moved("plane-a", "plane-a", true)
			s.UID = "another-uid"
			return domains{c, s}
		}},
		"taken, a status due, gone from the server": {planeID: "plane-a", domains: func() domains {
			return domains{unitDomain("plane-a", true), nil}
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := tc.domains()
			c, writes := recordingClient(d.cache, userNamespace(tc.planeID))
			b := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(userNamespace(tc.planeID))
			if d.server != nil {
				b = b.WithObjects(d.server)
			}
			server := b.Build()
			r := New(c, server, Options{DriverNamespace: testDriverNS, DaemonImage: "img", ControlPlaneID: tc.planeID})
			refusals := func() float64 {
				return promtestutil.ToFloat64(metrics.ForeignRefusals.WithLabelValues(tc.planeID, "ComputeDomain"))
			}
			before := refusals()

			pass(t, r)
			if diff := cmp.Diff(tc.want, writes.of("ComputeDomain"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("writes to the domain (-want +got):\n%s", diff)
			}
			want := 0.0
			if tc.refused {
				want = 1
			}
			if got := refusals() - before; got != want {
				t.Errorf("refusals counted +%v, want +%v", got, want)
			}
			// Nor does it create anything for the domain: its claim templates, DaemonSet and
			// cliques are as much the domain's as its status.
			made := 0
			for _, kind := range []string{"ResourceClaimTemplate", "DaemonSet", "ComputeDomainClique"} {
				made += len(writes.of(kind))
				if tc.want == nil && len(writes.of(kind)) > 0 {
					t.Errorf("the server says the domain is not this plane's, yet the pass wrote its %ss: %v", kind, writes.of(kind))
				}
			}
			if tc.want != nil {
				if made == 0 {
					t.Errorf("control: the pass created nothing for the domain")
				}
				return // the controls: written
			}
			cached := &cdv1beta1.ComputeDomain{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(d.cache), cached); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(d.cache.Finalizers, cached.Finalizers); diff != "" {
				t.Errorf("finalizers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(cdv1beta1.ComputeDomainStatus{}, cached.Status); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}
