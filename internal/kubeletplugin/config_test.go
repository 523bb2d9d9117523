package kubeletplugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"

	cdv1beta1 "cdplane/api/v1beta1"
)

func TestDecodeConfig(t *testing.T) {
	gv := `"apiVersion":"resource.nvidia.com/v1beta1"`
	cases := map[string]struct {
		raw     string
		want    runtime.Object
		wantErr string
	}{
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
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeConfig([]byte(tc.raw))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !IsPermanent(err) {
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
