package testutil

import "maps"

// TestImageRepository is the image repository tests give the plane chart, which has no default:
// the simulator's kubelet runs the binaries for it, and the admission policies pin the daemon
// image to what the chart renders from it.
const TestImageRepository = "cdplane"

// WithImage returns a copy of the plane chart values vals with image.repository set to
// TestImageRepository unless vals sets one.
func WithImage(vals map[string]any) map[string]any {
	out := maps.Clone(vals)
	if out == nil {
		out = map[string]any{}
	}
	img, _ := out["image"].(map[string]any)
	if _, ok := img["repository"]; ok {
		return out
	}
	img = maps.Clone(img)
	if img == nil {
		img = map[string]any{}
	}
	img["repository"] = TestImageRepository
	out["image"] = img
	return out
}
