package claims

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"cdplane/internal/kubeletplugin/checkpoint"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/failure"
)

func TestAddLabelDecision(t *testing.T) {
	cases := map[string]struct {
		current string
		add     bool
		err     string
	}{
		"unlabelled":   {current: "", add: true},
		"already ours": {current: "cd-a"},
		"another":      {current: "cd-b", err: "node n1 already serves ComputeDomain cd-b"},
	}
	for name, tc := range cases {
		add, err := addLabelDecision("n1", tc.current, "cd-a")
		if add != tc.add || (tc.err == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), tc.err) || !failure.IsRetryable(err))) {
			t.Errorf("%s: add=%v err=%v, want add=%v err containing %q (retryable)", name, add, err, tc.add, tc.err)
		}
	}
}

func TestRemoveLabelDecision(t *testing.T) {
	entry := func(kind devices.DeviceKind, domain string, state checkpoint.ClaimState) checkpoint.ClaimEntry {
		return checkpoint.ClaimEntry{Kind: string(kind), DomainID: domain, State: state}
	}
	self := types.UID("self")
	cases := map[string]struct {
		current string
		others  map[types.UID]checkpoint.ClaimEntry
		want    bool
	}{
		"ours, last claim":        {current: "cd-a", want: true},
		"not ours":                {current: "cd-b"},
		"unlabelled":              {current: ""},
		"another claim completed": {current: "cd-a", others: map[types.UID]checkpoint.ClaimEntry{"o": entry(devices.KindChannel, "cd-a", checkpoint.PrepareCompleted)}},
		"another claim started":   {current: "cd-a", others: map[types.UID]checkpoint.ClaimEntry{"o": entry(devices.KindChannel, "cd-a", checkpoint.PrepareStarted)}},
		"another claim aborted":   {current: "cd-a", others: map[types.UID]checkpoint.ClaimEntry{"o": entry(devices.KindChannel, "cd-a", checkpoint.PrepareAborted)}, want: true},
		"other domain's claim":    {current: "cd-a", others: map[types.UID]checkpoint.ClaimEntry{"o": entry(devices.KindChannel, "cd-b", checkpoint.PrepareCompleted)}, want: true},
		"daemon claim of domain":  {current: "cd-a", others: map[types.UID]checkpoint.ClaimEntry{"o": entry(devices.KindDaemon, "cd-a", checkpoint.PrepareCompleted)}, want: true},
	}
	for name, tc := range cases {
		claims := map[types.UID]checkpoint.ClaimEntry{self: entry(devices.KindChannel, "cd-a", checkpoint.PrepareCompleted)}
		for k, v := range tc.others {
			claims[k] = v
		}
		if got := removeLabelDecision(tc.current, "cd-a", self, claims); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}
