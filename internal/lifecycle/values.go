package lifecycle

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// Values is how `apply` treats the values an installed release holds.
type Values int

const (
	// KeepValues merges the new values over the release's (what was set at install or at an
	// earlier apply and is not set again stays), on the new chart's defaults: Helm's
	// --reset-then-reuse-values. A value set to null is removed, falling back to the default.
	KeepValues Values = iota
	// ResetValues starts from the chart's defaults with only the new values (Helm's
	// --reset-values, and what `helm upgrade` does without a --reuse flag).
	ResetValues
)

// keptValues returns the values an apply writes: with KeepValues, values merged over the
// release's (kept lists the dotted keys the release's values set that values does not); with
// ResetValues, values.
func keptValues(mode Values, release, values map[string]any) (merged map[string]any, kept []string) {
	if mode == ResetValues || len(release) == 0 {
		return values, nil
	}
	// controlPlaneID is always set again (RenderPlane): not a kept value.
	kept = slices.DeleteFunc(leafKeys("", release, values), func(k string) bool { return k == "controlPlaneID" })
	return loader.MergeMaps(release, values), kept
}

// leafKeys returns the dotted keys of the leaves of base that over does not set (a map in over
// is looked into; any other value of over replaces the whole subtree).
func leafKeys(prefix string, base, over map[string]any) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(base)) {
		key := strings.TrimPrefix(prefix+"."+k, ".")
		o, set := over[k]
		bm, isMap := base[k].(map[string]any)
		om, overMap := o.(map[string]any)
		switch {
		case isMap && len(bm) > 0 && (!set || overMap):
			out = append(out, leafKeys(key, bm, om)...)
		case !set:
			out = append(out, key)
		}
	}
	return out
}

// describeKept is the progress line for the values an apply keeps.
func describeKept(kept []string) string {
	const show = 8
	list := strings.Join(kept[:min(len(kept), show)], ", ")
	if len(kept) > show {
		list += ", and " + strconv.Itoa(len(kept)-show) + " more"
	}
	return "Keeping the values the release holds and this apply does not set (" + list + "); --reset-values starts from the chart's defaults instead"
}
