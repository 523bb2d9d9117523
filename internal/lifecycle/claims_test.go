package lifecycle

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
)

func TestCheckClaimsInUse(t *testing.T) {
	claim := func(name string) *testutil.ResourceClaimWrapper { return testutil.MakeResourceClaim(name, "team") }
	cases := map[string]struct {
		target Target
		claims []*resourcev1.ResourceClaim
		want   []string // ClaimsInUse; a refusal when not empty
	}{
		"none": {target: Target{Kind: KindNamespace, Name: "team"}},
		"not allocated, reserved for nobody, or by another driver": {
			target: Target{Kind: KindNamespace, Name: "team"},
			claims: []*resourcev1.ResourceClaim{
				claim("pending").Obj(),
				claim("idle").Device("r", cdv1beta1.DriverName, "n1", "channel-0").Obj(),
				claim("gpu").Device("r", "gpu.nvidia.com", "n1", "gpu-0").ReservedFor("p", "u").Obj(),
			},
		},
		"ours, in use: named with their users": {
			target: Target{Kind: KindNamespace, Name: "team"},
			claims: []*resourcev1.ResourceClaim{
				claim("b").Device("r", "gpu.nvidia.com", "n1", "gpu-0").Device("c", cdv1beta1.DriverName, "n1", "channel-0").ReservedFor("p2", "u2").Obj(),
				claim("a").Device("r", cdv1beta1.DriverName, "n1", "channel-0").ReservedFor("p1", "u1").ReservedFor("p3", "u3").Obj(),
			},
			want: []string{"team/a (reserved for pods/p1, pods/p3)", "team/b (reserved for pods/p2)"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			claims := make([]resourcev1.ResourceClaim, 0, len(tc.claims))
			for _, c := range tc.claims {
				claims = append(claims, *c)
			}
			if diff := cmp.Diff(tc.want, ClaimsInUse(claims)); diff != "" {
				t.Errorf("ClaimsInUse (-want +got):\n%s", diff)
			}
			err := CheckClaimsInUse(tc.target, "a", claims)
			if len(tc.want) == 0 {
				checkRefusal(t, err, "", false)
				return
			}
			checkRefusal(t, err, "holds ResourceClaims that compute-domain.nvidia.com allocated and pods use: "+tc.want[0], false)
			checkRefusal(t, err, "--force does not override this", false)
			// A node is never refused for claims.
			checkRefusal(t, CheckClaimsInUse(Target{Kind: KindNode, Name: "n1"}, "a", claims), "", false)
		})
	}
}
