package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// The fixtures' ComputeDomain, node and claims (testdata/checkpoints/README.md).
const (
	fxDomain = "6a1f3c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b"
	fxNode   = "gb200-rack1-node7"
	fxBoot   = "4b6d1e0a-2c3f-4e5d-8f7a-9b0c1d2e3f40"

	fxChannel        types.UID = "0d2c6b6e-3a51-4f0e-9c43-5f3a8e7d1a01"
	fxDaemon         types.UID = "0d2c6b6e-3a51-4f0e-9c43-5f3a8e7d1a02"
	fxChannelStarted types.UID = "0d2c6b6e-3a51-4f0e-9c43-5f3a8e7d1a03"
	fxChannelAborted types.UID = "0d2c6b6e-3a51-4f0e-9c43-5f3a8e7d1a04"
	fxDaemonStarted  types.UID = "0d2c6b6e-3a51-4f0e-9c43-5f3a8e7d1a05"
)

// The time the tests' opener sets files aside at, and the name it gives them.
var (
	fxNow   = time.Date(2026, 7, 20, 10, 15, 0, 0, time.FixedZone("CEST", 2*3600))
	fxAside = ".unreadable-20260720T081500Z"
)

// The claims of the fixtures as this plugin's entries.
func fxChannelEntry() ClaimEntry {
	return ClaimEntry{State: PrepareCompleted, Kind: "channel", DomainID: fxDomain,
		CDISpec: "k8s.compute-domain.nvidia.com-claim_" + string(fxChannel) + ".yaml",
		Devices: []PreparedDevice{{Requests: []string{"channel"}, Pool: fxNode, Device: "channel-0",
			CDIDeviceIDs: []string{"k8s.compute-domain.nvidia.com/claim=" + string(fxChannel) + "-channel-0"}}}}
}

func fxDaemonEntry() ClaimEntry {
	return ClaimEntry{State: PrepareCompleted, Kind: "daemon", DomainID: fxDomain,
		CDISpec: "k8s.compute-domain.nvidia.com-claim_" + string(fxDaemon) + ".yaml",
		Devices: []PreparedDevice{{Requests: []string{"daemon"}, Pool: fxNode, Device: "daemon-0",
			CDIDeviceIDs: []string{"k8s.compute-domain.nvidia.com/device=all", "k8s.compute-domain.nvidia.com/claim=" + string(fxDaemon) + "-daemon-0"}}}}
}

func named(e ClaimEntry, ns, name string) ClaimEntry {
	e.Namespace, e.Name = ns, name
	return e
}

func inState(e ClaimEntry, s ClaimState) ClaimEntry {
	e.State = s
	return e
}

func fxStartedEntry(uid types.UID, kind string) ClaimEntry {
	return ClaimEntry{State: PrepareStarted, Kind: kind, DomainID: fxDomain, CDISpec: "k8s.compute-domain.nvidia.com-claim_" + string(uid) + ".yaml"}
}

// fixtureOpener opens checkpoints at fxNow on a node whose boot id is bootID.
func fixtureOpener(bootID string) Opener {
	return Opener{now: func() time.Time { return fxNow }, bootID: func() (string, error) { return bootID, nil }}
}

// stateDirWith is a state directory whose checkpoint file holds data.
func stateDirWith(t *testing.T, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, File), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "checkpoints", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// dirFiles maps the names of a directory's files to their content.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(data)
	}
	return out
}

// Each layout NVIDIA's plugin has written converts to the claims it lists; the original is kept
// byte for byte beside the converted checkpoint, which a second open reads as this plugin's
// format.
func TestOpenCheckpointTakesOverNVIDIAs(t *testing.T) {
	startedDaemon := named(fxStartedEntry(fxDaemonStarted, "daemon"), "nvidia-dra-driver", "trainer-cd-daemon-q9w4z-daemon")
	aborted := ClaimEntry{State: PrepareAborted, Namespace: "ml-team", Name: "trainer-2-channel", Kind: "channel", DomainID: fxDomain}
	cases := map[string]struct {
		fixture string
		bootID  string
		format  nvidiaFormat
		want    map[types.UID]ClaimEntry
	}{
		"v25.3.0-rc.2": {fixture: "nvidia-v1rc.json", format: nvidiaV1RC,
			want: map[types.UID]ClaimEntry{fxChannel: fxChannelEntry(), fxDaemon: fxDaemonEntry()}},
		"configState without type": {fixture: "nvidia-v1rc-untyped.json", format: nvidiaV1RC,
			want: map[types.UID]ClaimEntry{fxChannel: fxChannelEntry(), fxDaemon: fxDaemonEntry()}},
		"groups with Go's device fields": {fixture: "nvidia-v1rc-gofields.json", format: nvidiaV1RC,
			want: map[types.UID]ClaimEntry{fxChannel: fxChannelEntry()}},
		"v25.3.2": {fixture: "nvidia-v1.json", format: nvidiaV1,
			want: map[types.UID]ClaimEntry{fxChannel: fxChannelEntry(), fxDaemon: fxDaemonEntry()}},
		"v2 without its own checksum": {fixture: "nvidia-v2-nochecksum.json", format: nvidiaV2,
			want: map[types.UID]ClaimEntry{fxChannel: fxChannelEntry()}},
		"v25.12.0": {fixture: "nvidia-v2.json", format: nvidiaV2,
			want: map[types.UID]ClaimEntry{
				fxChannel:        named(fxChannelEntry(), "ml-team", "trainer-0-channel"),
				fxDaemon:         named(fxDaemonEntry(), "nvidia-dra-driver", "trainer-cd-daemon-x7k2p-daemon"),
				fxChannelStarted: named(fxStartedEntry(fxChannelStarted, "channel"), "ml-team", "trainer-1-channel"),
			}},
		"PrepareStarted without a name": {fixture: "nvidia-v2-noname.json", format: nvidiaV2,
			want: map[types.UID]ClaimEntry{fxDaemonStarted: fxStartedEntry(fxDaemonStarted, "daemon")}},
		"v0.4 and main, same boot": {fixture: "nvidia-v2-bootid.json", bootID: fxBoot, format: nvidiaV2,
			want: map[types.UID]ClaimEntry{
				fxChannel:        named(fxChannelEntry(), "ml-team", "trainer-0-channel"),
				fxDaemon:         named(fxDaemonEntry(), "nvidia-dra-driver", "trainer-cd-daemon-x7k2p-daemon"),
				fxChannelAborted: aborted,
				fxDaemonStarted:  startedDaemon,
			}},
		"v0.4 and main, rebooted since": {fixture: "nvidia-v2-bootid.json", bootID: "0f0e0d0c-0000-4000-8000-000000000001", format: nvidiaV2,
			want: map[types.UID]ClaimEntry{
				fxChannel:        inState(named(fxChannelEntry(), "ml-team", "trainer-0-channel"), PrepareStarted),
				fxDaemon:         inState(named(fxDaemonEntry(), "nvidia-dra-driver", "trainer-cd-daemon-x7k2p-daemon"), PrepareStarted),
				fxChannelAborted: aborted,
				fxDaemonStarted:  startedDaemon,
			}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			original := readFixture(t, tc.fixture)
			dir := stateDirWith(t, original)
			s, err := fixtureOpener(tc.bootID).Open(t.Context(), dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, s.Snapshot()); diff != "" {
				t.Errorf("claims taken over (-want +got):\n%s", diff)
			}
			files := dirFiles(t, dir)
			kept := File + ".nvidia-" + string(tc.format) + ".bak"
			if files[kept] != string(original) {
				t.Errorf("the original is not kept as %s; the state directory holds %v", kept, keys(files))
			}
			if len(files) != 2 {
				t.Errorf("the state directory holds %v, want %s and %s", keys(files), File, kept)
			}
			again, err := Read(filepath.Join(dir, File))
			if err != nil {
				t.Fatalf("the converted checkpoint is not in this plugin's format: %v", err)
			}
			if diff := cmp.Diff(tc.want, again.Claims); diff != "" {
				t.Errorf("claims read back (-want +got):\n%s", diff)
			}
			reopened, err := fixtureOpener(tc.bootID).Open(t.Context(), dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, reopened.Snapshot()); diff != "" {
				t.Errorf("claims after a second open (-want +got):\n%s", diff)
			}
			if got := dirFiles(t, dir); len(got) != 2 {
				t.Errorf("a second open changed the state directory to %v", keys(got))
			}
		})
	}
}

// What cannot be read from NVIDIA's checkpoint: every case is a variant of a fixture.
func TestDecodeNVIDIACheckpointRefuses(t *testing.T) {
	v2 := string(readFixture(t, "nvidia-v2.json"))
	v1 := string(readFixture(t, "nvidia-v1.json"))
	noOwnSum := string(readFixture(t, "nvidia-v2-nochecksum.json"))
	cases := map[string]struct {
		data string
		want string
	}{
		"v2 changed":                       {data: strings.Replace(v2, `"trainer-1-channel"`, `"trainer-9-channel"`, 1), want: "v2 section fails its checksum"},
		"v2 checksum changed":              {data: strings.Replace(v2, `"v2":{"checksum":`, `"v2":{"checksum":1`, 1), want: "v2 section fails its checksum"},
		"v1 changed":                       {data: strings.Replace(v1, `"channel-0"`, `"channel-1"`, 1), want: "fails its checksum"},
		"v1 copy of v2 changed":            {data: strings.Replace(v2, `"name":"trainer-0"`, `"name":"trainer-X"`, 1), want: "fails its checksum"},
		"top checksum changed":             {data: strings.Replace(v1, `{"checksum":`, `{"checksum":9`, 1), want: "fails its checksum"},
		"v2 without checksum changed":      {data: strings.Replace(noOwnSum, `"channel-0"`, `"channel-1"`, 1), want: "without a checksum of its own"},
		"checksum not a number":            {data: `{"checksum":"abc","v1":{}}`, want: "not a checksum"},
		"negative checksum":                {data: `{"checksum":-1,"v1":{}}`, want: "not a checksum"},
		"only a later version":             {data: withChecksum(`{"checksum":0,"v3":{"preparedClaims":{}}}`), want: "no section this plugin reads (v1 or v2), only [checksum v3]"},
		"a claim that is not an object":    {data: withChecksum(`{"checksum":0,"v1":{"preparedClaims":{"a":7}}}`), want: "neither a list of device groups nor an object"},
		"claims of both v1 layouts":        {data: withChecksum(`{"checksum":0,"v1":{"preparedClaims":{"a":[],"b":{}}}}`), want: "mixes claims of two layouts"},
		"a v2 claim that is null":          {data: withV2Checksum(`{"checksum":0,"v2":{"checksum":0,"preparedClaims":{"a":null}}}`), want: "without UID or state"},
		"a v2 claim with a bad state":      {data: withV2Checksum(`{"checksum":0,"v2":{"checksum":0,"preparedClaims":{"a":{"checkpointState":7}}}}`), want: "v2 section cannot be decoded"},
		"a device group of the wrong type": {data: withChecksum(`{"checksum":0,"v1":{"preparedClaims":{"a":[{"devices":{}}]}}}`), want: "v1 claim a cannot be decoded"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := Decode("f", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decoding: %v (%+v), want an error containing %q", err, d.nvidia, tc.want)
			}
			var unreadable *UnreadableCheckpointError
			if !errors.As(err, &unreadable) {
				t.Errorf("error %T is not an *UnreadableCheckpointError", err)
			}
		})
	}
}

// withChecksum fills the top-level checksum of a checkpoint written with it at 0, as NVIDIA's
// plugin does: over {"checksum":0,"v1":<v1>}.
func withChecksum(data string) string {
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &top); err != nil {
		panic(err)
	}
	covered := `{"checksum":0`
	if v1, ok := top["v1"]; ok {
		covered += `,"v1":` + string(v1)
	}
	covered += "}"
	return strings.Replace(data, `{"checksum":0`, `{"checksum":`+strconvU(kubeletChecksum([]byte(covered))), 1)
}

// withV2Checksum fills v2's own checksum and then the top-level one.
func withV2Checksum(data string) string {
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &top); err != nil {
		panic(err)
	}
	v2 := string(top["v2"])
	filled := strings.Replace(v2, `{"checksum":0`, `{"checksum":`+strconvU(kubeletChecksum(top["v2"])), 1)
	return withChecksum(strings.Replace(data, v2, filled, 1))
}

// The checksum is the kubelet checkpointmanager's. The known answers are checksums that NVIDIA's
// plugin's own reader accepted (testdata/checkpoints/README.md).
func TestKubeletChecksum(t *testing.T) {
	for data, want := range map[string]uint64{
		`{"checksum":0,"v1":{}}`: 1083090442, // nvidia-v2-noname.json's top-level checksum
	} {
		if got := kubeletChecksum([]byte(data)); got != want {
			t.Errorf("checksum of %s: %d, want %d", data, got, want)
		}
	}
	for _, name := range []string{"nvidia-v1rc.json", "nvidia-v1.json", "nvidia-v2.json", "nvidia-v2-nochecksum.json"} {
		data := readFixture(t, name)
		var top map[string]json.RawMessage
		if err := json.Unmarshal(data, &top); err != nil {
			t.Fatal(err)
		}
		if err := verifyNVIDIAChecksums(data, top); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func strconvU(v uint64) string { return strconv.FormatUint(v, 10) }

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
