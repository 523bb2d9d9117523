package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cdplane/internal/sim/kubelet"
)

// TestLoadImageReplacesWhole: a loaded image is where the simulated kubelet looks for it;
// loading it again replaces it whole (no file of the first load stays, nothing is left beside
// it); a directory without binaries is refused.
func TestLoadImageReplacesWhole(t *testing.T) {
	root := t.TempDir()
	st := &State{BinDir: filepath.Join(root, "bin")}
	binaries := func(files ...string) string {
		t.Helper()
		dir := t.TempDir()
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\necho "+f+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	const image = "registry.example.com/cdplane:0.1.0"
	if err := st.LoadImage(image, binaries("cdplane", "cdplane-daemon")); err != nil {
		t.Fatal(err)
	}
	if err := st.LoadImage(image, binaries("cdplane")); err != nil {
		t.Fatal(err)
	}
	dest := kubelet.LoadedImageDir(st.ImagesDir(), image)
	entries, err := os.ReadDir(dest) // through the link, as the kubelet looks
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "cdplane" {
		t.Errorf("the image after loading it again holds %v, want only the second load's cdplane", names)
	}
	beside, err := os.ReadDir(filepath.Dir(dest))
	if err != nil {
		t.Fatal(err)
	}
	if len(beside) != 2 { // the link and the directory it names
		var all []string
		for _, e := range beside {
			all = append(all, e.Name())
		}
		t.Errorf("beside the image: %v, want the link and one directory", all)
	}
	if err := st.LoadImage("cdplane:empty", t.TempDir()); err == nil || !strings.Contains(err.Error(), "holds no binaries") {
		t.Errorf("loading an empty directory: %v, want it refused", err)
	}
}
