package nvml

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	clusterA = [16]byte{0x4c, 0x9d, 0x5b, 0x2b, 0x11, 0x22, 0x43, 0x44, 0x85, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc}
	clusterB = [16]byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
)

const (
	cliqueA7 = "4c9d5b2b-1122-4344-8566-778899aabbcc.7"
	cliqueB7 = "deadbeef-0000-0000-0000-000000000001.7"
)

func completed(cluster [16]byte, clique uint32) FabricInfo {
	return FabricInfo{Supported: true, State: FabricStateCompleted, Status: FabricStatusSuccess, ClusterUUID: cluster, CliqueID: clique}
}

func gpu(i int, f FabricInfo) GPU {
	return GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Fabric: f}
}

func TestDeriveCliqueID(t *testing.T) {
	inProgress := FabricInfo{Supported: true, State: FabricStateInProgress, ClusterUUID: clusterA, CliqueID: 7}
	notStarted := FabricInfo{Supported: true, State: FabricStateNotStarted}
	failed := FabricInfo{Supported: true, State: FabricStateCompleted, Status: 999, ClusterUUID: clusterA, CliqueID: 7}

	cases := map[string]struct {
		gpus       []GPU
		wantID     string
		wantErr    error
		wantIs     error // sentinel the error must match; nil when wantErr is nil
		wantIsNot  error // sentinel the error must not match
		wantErrMsg string
	}{
		"no GPUs: empty clique": {
			gpus: nil,
		},
		"all GPUs in one clique": {
			gpus:   []GPU{gpu(0, completed(clusterA, 7)), gpu(1, completed(clusterA, 7)), gpu(2, completed(clusterA, 7)), gpu(3, completed(clusterA, 7))},
			wantID: cliqueA7,
		},
		"single GPU with clique id 0": {
			gpus:   []GPU{gpu(0, completed(clusterB, 0))},
			wantID: "deadbeef-0000-0000-0000-000000000001.0",
		},
		"clique id formatted in decimal": {
			gpus:   []GPU{gpu(0, completed(clusterB, 32766))},
			wantID: "deadbeef-0000-0000-0000-000000000001.32766",
		},
		"fabric info not supported: no fabric": {
			gpus: []GPU{gpu(0, FabricInfo{}), gpu(1, FabricInfo{})},
		},
		"state NOT_SUPPORTED: no fabric": {
			gpus: []GPU{gpu(0, FabricInfo{Supported: true, State: FabricStateNotSupported})},
		},
		"zero cluster UUID: no fabric": {
			gpus: []GPU{gpu(0, completed([16]byte{}, 7)), gpu(1, completed([16]byte{}, 7))},
		},
		"not started: not ready": {
			gpus:      []GPU{gpu(0, completed(clusterA, 7)), gpu(1, notStarted)},
			wantErr:   &NotReadyError{Index: 1, UUID: "GPU-b", State: FabricStateNotStarted},
			wantIs:    ErrFabricNotReady,
			wantIsNot: ErrFabricFailed,
		},
		"in progress: not ready, first such GPU named": {
			gpus:       []GPU{gpu(0, inProgress), gpu(1, notStarted)},
			wantErr:    &NotReadyError{Index: 0, UUID: "GPU-a", State: FabricStateInProgress},
			wantIs:     ErrFabricNotReady,
			wantIsNot:  ErrFabricFailed,
			wantErrMsg: "GPU 0 (GPU-a): NVLink fabric registration not finished (state IN_PROGRESS); the clique is not known yet, retry later",
		},
		"completed with a failure status: fabric error": {
			gpus:       []GPU{gpu(0, completed(clusterA, 7)), gpu(1, failed)},
			wantErr:    &FabricError{Index: 1, UUID: "GPU-b", State: FabricStateCompleted, Status: 999},
			wantIs:     ErrFabricFailed,
			wantIsNot:  ErrFabricNotReady,
			wantErrMsg: "GPU 1 (GPU-b): NVLink fabric registration failed: state COMPLETED, status ERROR_UNKNOWN",
		},
		"unknown state: fabric error": {
			gpus:       []GPU{gpu(0, FabricInfo{Supported: true, State: 9, Status: 0})},
			wantErr:    &FabricError{Index: 0, UUID: "GPU-a", State: 9},
			wantIs:     ErrFabricFailed,
			wantIsNot:  ErrFabricNotReady,
			wantErrMsg: "GPU 0 (GPU-a): NVLink fabric in unknown state UNKNOWN(9) (status SUCCESS)",
		},
		"failure wins over an earlier not-ready GPU": {
			gpus:      []GPU{gpu(0, inProgress), gpu(1, failed)},
			wantErr:   &FabricError{Index: 1, UUID: "GPU-b", State: FabricStateCompleted, Status: 999},
			wantIs:    ErrFabricFailed,
			wantIsNot: ErrFabricNotReady,
		},
		"not ready wins over a mismatch": {
			gpus:      []GPU{gpu(0, completed(clusterA, 7)), gpu(1, completed(clusterB, 7)), gpu(2, inProgress)},
			wantErr:   &NotReadyError{Index: 2, UUID: "GPU-c", State: FabricStateInProgress},
			wantIs:    ErrFabricNotReady,
			wantIsNot: ErrFabricFailed,
		},
		"GPUs in different clusters: mismatch": {
			gpus: []GPU{gpu(0, completed(clusterA, 7)), gpu(1, completed(clusterA, 7)), gpu(2, completed(clusterB, 7))},
			wantErr: &MismatchError{
				First: gpu(0, completed(clusterA, 7)), FirstCliqueID: cliqueA7,
				Second: gpu(2, completed(clusterB, 7)), SecondCliqueID: cliqueB7,
			},
			wantIs:     ErrFabricFailed,
			wantIsNot:  ErrFabricNotReady,
			wantErrMsg: `GPUs of one node disagree on their NVLink clique: GPU 0 (GPU-a) is in clique "` + cliqueA7 + `", GPU 2 (GPU-c) is in clique "` + cliqueB7 + `"`,
		},
		"GPUs in different cliques of one cluster: mismatch": {
			gpus: []GPU{gpu(0, completed(clusterA, 7)), gpu(1, completed(clusterA, 8))},
			wantErr: &MismatchError{
				First: gpu(0, completed(clusterA, 7)), FirstCliqueID: cliqueA7,
				Second: gpu(1, completed(clusterA, 8)), SecondCliqueID: "4c9d5b2b-1122-4344-8566-778899aabbcc.8",
			},
			wantIs: ErrFabricFailed,
		},
		"GPUs without fabric among fabric GPUs: the fabric GPUs' clique": {
			gpus:   []GPU{gpu(0, FabricInfo{}), gpu(1, completed(clusterA, 7)), gpu(2, FabricInfo{Supported: true, State: FabricStateNotSupported}), gpu(3, completed(clusterA, 7))},
			wantID: cliqueA7,
		},
		"a GPU without fabric first, then two cliques: mismatch between the fabric GPUs": {
			gpus: []GPU{gpu(0, FabricInfo{}), gpu(1, completed(clusterA, 7)), gpu(2, completed(clusterB, 7))},
			wantErr: &MismatchError{
				First: gpu(1, completed(clusterA, 7)), FirstCliqueID: cliqueA7,
				Second: gpu(2, completed(clusterB, 7)), SecondCliqueID: cliqueB7,
			},
			wantIs:     ErrFabricFailed,
			wantErrMsg: `GPUs of one node disagree on their NVLink clique: GPU 1 (GPU-b) is in clique "` + cliqueA7 + `", GPU 2 (GPU-c) is in clique "` + cliqueB7 + `"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			id, err := DeriveCliqueID(tc.gpus)
			if id != tc.wantID {
				t.Errorf("clique id = %q, want %q", id, tc.wantID)
			}
			if diff := cmp.Diff(tc.wantErr, err); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false, want true", err, tc.wantIs)
			}
			if tc.wantIsNot != nil && errors.Is(err, tc.wantIsNot) {
				t.Errorf("errors.Is(%v, %v) = true, want false", err, tc.wantIsNot)
			}
			if tc.wantErrMsg != "" && (err == nil || err.Error() != tc.wantErrMsg) {
				t.Errorf("error message = %v, want %q", err, tc.wantErrMsg)
			}
		})
	}
}

func TestParseUUID(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    [16]byte
		wantErr bool
	}{
		"canonical lowercase": {in: "4c9d5b2b-1122-4344-8566-778899aabbcc", want: clusterA},
		"uppercase":           {in: "4C9D5B2B-1122-4344-8566-778899AABBCC", want: clusterA},
		"no dashes":           {in: "4c9d5b2b112243448566778899aabbcc", wantErr: true},
		"misplaced dashes":    {in: "4c9d5b2b1-122-4344-8566-778899aabbcc", wantErr: true},
		"not hex":             {in: "4c9d5b2b-1122-4344-8566-778899aabbcz", wantErr: true},
		"empty":               {in: "", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseUUID(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseUUID(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseUUID(%q) = %x, want %x", tc.in, got, tc.want)
			}
			if !tc.wantErr && FormatUUID(got) != "4c9d5b2b-1122-4344-8566-778899aabbcc" {
				t.Errorf("FormatUUID round trip = %q", FormatUUID(got))
			}
		})
	}
}

func TestFabricStateText(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    FabricState
		wantErr bool
	}{
		"NVML name":        {in: `"COMPLETED"`, want: FabricStateCompleted},
		"lower with dash":  {in: `"in-progress"`, want: FabricStateInProgress},
		"with NVML prefix": {in: `"GPU_FABRIC_STATE_NOT_STARTED"`, want: FabricStateNotStarted},
		"not supported":    {in: `"not_supported"`, want: FabricStateNotSupported},
		"unknown name":     {in: `"DONE"`, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got FabricState
			err := json.Unmarshal([]byte(tc.in), &got)
			if (err != nil) != tc.wantErr {
				t.Fatalf("unmarshal %s: error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("unmarshal %s = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	if _, err := json.Marshal(FabricState(9)); err == nil {
		t.Errorf("marshalling unknown state 9: want an error")
	}
}
