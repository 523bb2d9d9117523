package checkpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// TestDecode: every format Decode reads, this plugin's by version and each of NVIDIA's layouts,
// goes through the one entry point and comes back as the current version, with its format named;
// a version no decoder knows, and a file of no format, are unreadable.
func TestDecode(t *testing.T) {
	own := ClaimEntry{State: PrepareCompleted, Namespace: "ns", Name: "c", Kind: "channel", DomainID: fxDomain,
		CDISpec: "k8s.compute-domain.nvidia.com-claim_u1.json", Devices: []PreparedDevice{{Requests: []string{"r"}, Pool: fxNode, Device: "channel-0"}}}
	ownV1 := `{"version":1,"claims":{"u1":{"state":"PrepareCompleted","namespace":"ns","name":"c","kind":"channel","domainID":"` + fxDomain +
		`","cdiSpec":"k8s.compute-domain.nvidia.com-claim_u1.json","devices":[{"requests":["r"],"pool":"` + fxNode + `","device":"channel-0"}]}}}`
	v2Claims := map[types.UID]ClaimEntry{
		fxChannel:        named(fxChannelEntry(), "ml-team", "trainer-0-channel"),
		fxDaemon:         named(fxDaemonEntry(), "nvidia-dra-driver", "trainer-cd-daemon-x7k2p-daemon"),
		fxChannelStarted: named(fxStartedEntry(fxChannelStarted, "channel"), "ml-team", "trainer-1-channel"),
	}
	cases := map[string]struct {
		data       string
		fixture    string
		wantFormat Format
		want       map[types.UID]ClaimEntry
		wantErr    string
	}{
		"v1":                           {data: ownV1, wantFormat: FormatV1, want: map[types.UID]ClaimEntry{"u1": own}},
		"v1 without claims":            {data: `{"version":1}`, wantFormat: FormatV1, want: map[types.UID]ClaimEntry{}},
		"v1 corrupt":                   {data: `{"version":1,"claims":[]}`, wantErr: "is corrupt"},
		"version not a number":         {data: `{"version":"1","claims":{}}`, wantErr: "is corrupt"},
		"version 0":                    {data: `{"version":0,"claims":{}}`, wantErr: "has version 0, this plugin reads version 1"},
		"a later version":              {data: `{"version":2,"claims":{}}`, wantErr: "has version 2, this plugin reads version 1"},
		"NVIDIA v1rc (v25.3.0-rc.2)":   {fixture: "nvidia-v1rc.json", wantFormat: FormatNVIDIAV1RC, want: map[types.UID]ClaimEntry{fxChannel: fxChannelEntry(), fxDaemon: fxDaemonEntry()}},
		"NVIDIA v1rc, Go's fields":     {fixture: "nvidia-v1rc-gofields.json", wantFormat: FormatNVIDIAV1RC, want: map[types.UID]ClaimEntry{fxChannel: fxChannelEntry()}},
		"NVIDIA v1rc, untyped":         {fixture: "nvidia-v1rc-untyped.json", wantFormat: FormatNVIDIAV1RC, want: map[types.UID]ClaimEntry{fxChannel: fxChannelEntry(), fxDaemon: fxDaemonEntry()}},
		"NVIDIA v1 (v25.3.2)":          {fixture: "nvidia-v1.json", wantFormat: FormatNVIDIAV1, want: map[types.UID]ClaimEntry{fxChannel: fxChannelEntry(), fxDaemon: fxDaemonEntry()}},
		"NVIDIA v2 (v25.12.0)":         {fixture: "nvidia-v2.json", wantFormat: FormatNVIDIAV2, want: v2Claims},
		"NVIDIA v2 without own sum":    {fixture: "nvidia-v2-nochecksum.json", wantFormat: FormatNVIDIAV2, want: map[types.UID]ClaimEntry{fxChannel: fxChannelEntry()}},
		"NVIDIA v2 started, no name":   {fixture: "nvidia-v2-noname.json", wantFormat: FormatNVIDIAV2, want: map[types.UID]ClaimEntry{fxDaemonStarted: fxStartedEntry(fxDaemonStarted, "daemon")}},
		"NVIDIA v2 with a boot id":     {fixture: "nvidia-v2-bootid.json", wantFormat: FormatNVIDIAV2},
		"NVIDIA's, failing its sum":    {data: `{"checksum":1,"v1":{"preparedClaims":{}}}`, wantErr: "is NVIDIA's checkpoint, but fails its checksum"},
		"neither version nor checksum": {data: `{"claims":{}}`, wantErr: "is neither this plugin's checkpoint"},
		"not JSON":                     {data: `{"version":1,`, wantErr: "is corrupt"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data := []byte(tc.data)
			if tc.fixture != "" {
				data = readFixture(t, tc.fixture)
			}
			got, err := Decode("f", data)
			if tc.wantErr != "" {
				var unreadable *UnreadableCheckpointError
				if !errors.As(err, &unreadable) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Decode: %v, want an *UnreadableCheckpointError containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Format != tc.wantFormat || got.Checkpoint.Version != Version {
				t.Errorf("format %q version %d, want %q version %d", got.Format, got.Checkpoint.Version, tc.wantFormat, Version)
			}
			if (got.nvidia != nil) != strings.HasPrefix(string(tc.wantFormat), "nvidia-") {
				t.Errorf("NVIDIA's details %v for format %q", got.nvidia, got.Format)
			}
			if tc.want != nil {
				if diff := cmp.Diff(tc.want, got.Checkpoint.Claims); diff != "" {
					t.Errorf("claims (-want +got):\n%s", diff)
				}
			}
		})
	}
}
