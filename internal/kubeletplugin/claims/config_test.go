package claims

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/failure"
)

// decodeConfigCase is one opaque config and what decoding it gives: the object, or a permanent
// error containing wantErr.
type decodeConfigCase struct {
	raw     string
	want    runtime.Object
	wantErr string
}

// decodeConfigCases are the table of TestDecodeConfig and the seed corpus of FuzzDecodeConfig.
func decodeConfigCases() map[string]decodeConfigCase {
	gv := `"apiVersion":"resource.nvidia.com/v1beta1"`
	return map[string]decodeConfigCase{
		"channel": {
			raw:  `{` + gv + `,"kind":"ComputeDomainChannelConfig","domainID":"` + testUID + `","allocationMode":"All"}`,
			want: cdv1beta1.NewChannelConfig(testUID, cdv1beta1.AllocationModeAll),
		},
		"channel defaults to Single": {
			raw:  `{` + gv + `,"kind":"ComputeDomainChannelConfig","domainID":"` + testUID + `"}`,
			want: cdv1beta1.NewChannelConfig(testUID, cdv1beta1.AllocationModeSingle),
		},
		"daemon": {
			raw:  `{` + gv + `,"kind":"ComputeDomainDaemonConfig","domainID":"` + testUID + `"}`,
			want: cdv1beta1.NewDaemonConfig(testUID),
		},
		"unknown field": {
			raw:     `{` + gv + `,"kind":"ComputeDomainChannelConfig","domainID":"x","unexpectedField":1}`,
			wantErr: `unknown field "unexpectedField"`,
		},
		"field of the other kind": {
			raw:     `{` + gv + `,"kind":"ComputeDomainDaemonConfig","domainID":"x","allocationMode":"All"}`,
			wantErr: `unknown field "allocationMode"`,
		},
		"wrong case is unknown": {
			raw:     `{` + gv + `,"kind":"ComputeDomainChannelConfig","DomainID":"x"}`,
			wantErr: `unknown field "DomainID"`,
		},
		"duplicate field": {
			raw:     `{` + gv + `,"kind":"ComputeDomainChannelConfig","domainID":"x","domainID":"y"}`,
			wantErr: `duplicate field "domainID"`,
		},
		"wrong kind": {
			raw:     `{` + gv + `,"kind":"GpuConfig","domainID":"x"}`,
			wantErr: `field kind is "GpuConfig"`,
		},
		"wrong apiVersion": {
			raw:     `{"apiVersion":"resource.nvidia.com/v1","kind":"ComputeDomainChannelConfig","domainID":"x"}`,
			wantErr: `field apiVersion is "resource.nvidia.com/v1"`,
		},
		"no domainID": {
			raw:     `{` + gv + `,"kind":"ComputeDomainDaemonConfig"}`,
			wantErr: "field domainID is required",
		},
		"bad allocationMode": {
			raw:     `{` + gv + `,"kind":"ComputeDomainChannelConfig","domainID":"x","allocationMode":"single"}`,
			wantErr: `field allocationMode is "single"`,
		},
		"wrong type": {
			raw:     `{` + gv + `,"kind":"ComputeDomainChannelConfig","domainID":7}`,
			wantErr: "domainID",
		},
		"not an object": {raw: `[1]`, wantErr: "not a JSON object"},
		"empty":         {raw: ``, wantErr: "empty"},
	}
}

func TestDecodeConfig(t *testing.T) {
	for name, tc := range decodeConfigCases() {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeConfig([]byte(tc.raw))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !failure.IsPermanent(err) {
					t.Fatalf("error %v, want a permanent error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzDecodeConfig: whatever a claim's opaque parameters hold (a user writes them), decoding
// never panics and either fails with a permanent error, or gives a channel or daemon config that
// is valid (a domainID that is a label value, a known allocation mode), that came from a JSON
// object whose every field is one of that kind's (the strictness the API promises), and that
// encodes to JSON decoding to the same config again.
func FuzzDecodeConfig(f *testing.F) {
	for _, tc := range decodeConfigCases() {
		f.Add([]byte(tc.raw))
	}
	for _, bad := range []string{
		`null`, `{}`, `"x"`, `{"apiVersion":null}`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"x","allocationMode":null}`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"a b"}`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"x","metadata":{}}`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"x"} trailing`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"\u0078"}`,
	} {
		f.Add([]byte(bad))
	}
	fields := map[string][]string{
		cdv1beta1.ComputeDomainChannelConfigKind: {"apiVersion", "kind", "domainID", "allocationMode"},
		cdv1beta1.ComputeDomainDaemonConfigKind:  {"apiVersion", "kind", "domainID"},
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		obj, err := DecodeConfig(raw)
		if err != nil {
			if !failure.IsPermanent(err) {
				t.Fatalf("error %v is not permanent", err)
			}
			if obj != nil {
				t.Fatalf("an error (%v) and a config %#v", err, obj)
			}
			return
		}
		var domainID, kind string
		switch c := obj.(type) {
		case *cdv1beta1.ComputeDomainChannelConfig:
			domainID, kind = c.DomainID, c.Kind
			if c.AllocationMode != cdv1beta1.AllocationModeSingle && c.AllocationMode != cdv1beta1.AllocationModeAll {
				t.Fatalf("decoded allocation mode %q", c.AllocationMode)
			}
		case *cdv1beta1.ComputeDomainDaemonConfig:
			domainID, kind = c.DomainID, c.Kind
		default:
			t.Fatalf("decoded a %T", obj)
		}
		if domainID == "" || len(validation.IsValidLabelValue(domainID)) > 0 {
			t.Fatalf("decoded domainID %q, which is not a label value", domainID)
		}
		if obj.GetObjectKind().GroupVersionKind() != cdv1beta1.GroupVersion.WithKind(kind) {
			t.Fatalf("decoded %v", obj.GetObjectKind().GroupVersionKind())
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(raw, &top); err != nil {
			t.Fatalf("decoded %q, which is not a JSON object: %v", raw, err)
		}
		for k := range top {
			if !slices.Contains(fields[kind], k) {
				t.Fatalf("decoded %q, with field %q that %s does not have", raw, k, kind)
			}
		}
		again, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeConfig(again)
		if err != nil {
			t.Fatalf("decoding %s, the encoding of a decoded config: %v", again, err)
		}
		if diff := cmp.Diff(obj, back); diff != "" {
			t.Fatalf("decode, encode, decode (-first +second):\n%s", diff)
		}
	})
}
