package lifecycle

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestKeptValues(t *testing.T) {
	release := map[string]any{
		"controlPlaneID":   "a",
		"image":            map[string]any{"repository": "registry.example/cdplane", "tag": "1.2.3"},
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		"monitoring":       map[string]any{"podMonitor": map[string]any{"enabled": true, "interval": "30s"}},
		"logVerbosity":     4,
	}
	for name, tc := range map[string]struct {
		mode        Values
		values      map[string]any
		want        map[string]any
		wantKept    []string
		wantAsGiven bool
	}{
		"keep: one value set, the rest stays": {
			mode: KeepValues, values: map[string]any{"logVerbosity": 2},
			want: map[string]any{
				"controlPlaneID": "a", "image": map[string]any{"repository": "registry.example/cdplane", "tag": "1.2.3"},
				"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
				"monitoring":       map[string]any{"podMonitor": map[string]any{"enabled": true, "interval": "30s"}},
				"logVerbosity":     2,
			},
			wantKept: []string{"image.repository", "image.tag", "imagePullSecrets", "monitoring.podMonitor.enabled", "monitoring.podMonitor.interval"},
		},
		"keep: a nested value merges, a list replaces, null removes": {
			mode: KeepValues, values: map[string]any{
				"image": map[string]any{"tag": "1.3.0"}, "imagePullSecrets": []any{}, "monitoring": nil,
			},
			want: map[string]any{
				"controlPlaneID": "a", "image": map[string]any{"repository": "registry.example/cdplane", "tag": "1.3.0"},
				"imagePullSecrets": []any{}, "monitoring": nil, "logVerbosity": 4,
			},
			wantKept: []string{"image.repository", "logVerbosity"},
		},
		"reset: only the new values": {
			mode: ResetValues, values: map[string]any{"logVerbosity": 2}, wantAsGiven: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, kept := keptValues(tc.mode, release, tc.values)
			want := tc.want
			if tc.wantAsGiven {
				want = tc.values
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantKept, kept); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
		})
	}
	if got, kept := keptValues(KeepValues, nil, map[string]any{"a": 1}); kept != nil || got["a"] != 1 {
		t.Errorf("a release without values: %v, kept %v", got, kept)
	}
}
