package claims

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/checkpoint"
)

// Two claims of the checkpoint fixture nvidia-v2.json (checkpoint/testdata/checkpoints/README.md).
const (
	fxChannel types.UID = "0d2c6b6e-3a51-4f0e-9c43-5f3a8e7d1a01"
	fxDaemon  types.UID = "0d2c6b6e-3a51-4f0e-9c43-5f3a8e7d1a02"
)

// A claim taken over from NVIDIA's checkpoint is unprepared: the CDI spec NVIDIA's plugin wrote
// for it is removed and its entry goes; the other claims stay.
func TestUnprepareClaimTakenOverFromNVIDIA(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "checkpoint", "testdata", "checkpoints", "nvidia-v2.json"))
	if err != nil {
		t.Fatal(err)
	}
	state, cdiDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(state, checkpoint.File), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cp, err := checkpoint.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cdi.NewWriter(cdiDir)
	if err != nil {
		t.Fatal(err)
	}
	// The spec as NVIDIA's plugin writes it: YAML, named by vendor, class and claim UID.
	nvidiaSpec := filepath.Join(cdiDir, "k8s.compute-domain.nvidia.com-claim_"+string(fxDaemon)+".yaml")
	other := filepath.Join(cdiDir, "k8s.compute-domain.nvidia.com-claim_"+string(fxChannel)+".yaml")
	for _, f := range []string{nvidiaSpec, other} {
		if err := os.WriteFile(f, []byte("cdiVersion: 0.5.0\nkind: k8s.compute-domain.nvidia.com/claim\ndevices: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Config{StateDir: state, CDIRoot: cdiDir}, Deps{Checkpoint: cp, Specs: w})
	if err := s.unprepareClaim(t.Context(), fxDaemon); err != nil {
		t.Fatalf("unprepare: %v", err)
	}
	if _, err := os.Stat(nvidiaSpec); !os.IsNotExist(err) {
		t.Errorf("NVIDIA's spec of the claim is still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another claim's spec: %v", err)
	}
	got, err := checkpoint.Read(filepath.Join(state, checkpoint.File))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Claims[fxDaemon]; ok || len(got.Claims) != 2 {
		t.Errorf("checkpoint after the unprepare lists %v, want the two other claims", claimList(got.Claims))
	}
}

func claimList(claims map[types.UID]checkpoint.ClaimEntry) []types.UID {
	out := make([]types.UID, 0, len(claims))
	for uid := range claims {
		out = append(out, uid)
	}
	return out
}
