package lifecycle

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cdplane/internal/testutil"
)

func TestRenderPlane(t *testing.T) {
	cases := map[string]struct {
		id     string
		values map[string]any
		want   string // "" renders
		wantNS string // the namespace of the plane's Deployment when it renders
	}{
		"legacy plane":               {id: "", wantNS: "cdplane"},
		"a plane":                    {id: "plane-a", wantNS: "plane-a-cdplane"},
		"a plane with values":        {id: "plane-a", values: map[string]any{"logVerbosity": 3}, wantNS: "plane-a-cdplane"},
		"the same id in the values":  {id: "plane-a", values: map[string]any{"controlPlaneID": "plane-a"}, wantNS: "plane-a-cdplane"},
		"invalid id":                 {id: "Plane-A", want: `invalid control-plane id "Plane-A": must be lowercase`},
		"reserved id":                {id: "default", want: `"default" is reserved`},
		"too long":                   {id: "a23456789012345678901", want: "must be at most 20 characters"},
		"a contradicting value":      {id: "plane-a", values: map[string]any{"controlPlaneID": "plane-b"}, want: `value controlPlaneID=plane-b contradicts --control-plane-id="plane-a"`},
		"a value for the legacy":     {id: "", values: map[string]any{"controlPlaneID": "plane-b"}, want: `contradicts --control-plane-id=""`},
		"a value the schema refuses": {id: "plane-a", values: map[string]any{"logVerbosity": 11}, want: "values of chart cdplane"},
		"a mistyped value":           {id: "plane-a", values: map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, want: "values of chart cdplane"},
		"no image":                   {id: "plane-a", values: map[string]any{"image": map[string]any{"repository": ""}}, want: "image.repository is not set"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := testutil.WithImage(tc.values)
			before := maps.Clone(in)
			vals, manifests, err := RenderPlane(tc.id, in)
			checkErr(t, err, tc.want)
			if diff := cmp.Diff(before, in); diff != "" {
				t.Errorf("RenderPlane changed its argument (-before +after):\n%s", diff)
			}
			if tc.want != "" {
				return
			}
			if vals["controlPlaneID"] != tc.id {
				t.Errorf("controlPlaneID = %v, want %q", vals["controlPlaneID"], tc.id)
			}
			var got []string
			for _, m := range manifests {
				if m.Object.GetKind() == "Deployment" {
					got = append(got, m.Object.GetNamespace())
				}
			}
			if diff := cmp.Diff([]string{tc.wantNS}, got); diff != "" {
				t.Errorf("namespaces of the rendered Deployments (-want +got):\n%s", diff)
			}
		})
	}
}
