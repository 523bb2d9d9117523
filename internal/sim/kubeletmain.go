package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"

	"cdplane/internal/sim/kubelet"
)

// RunKubelet is the background process `cdplane sim kubelet`: the simulated kubelet for every
// node of the sim in stateDir. Pods of image repository "cdplane" run the sim's binaries as
// processes; every other image runs the no-op container. It returns when ctx ends.
func RunKubelet(ctx context.Context, stateDir string) error {
	st, err := Load(stateDir)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("no simulated cluster in %s", stateDir)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", st.ControlPlane.Kubeconfig)
	if err != nil {
		return err
	}
	specs := make([]kubelet.NodeSpec, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		specs = append(specs, kubelet.NodeSpec{Name: n.Name, Labels: n.Labels, Capacity: capacity(), InternalIP: n.InternalIP})
	}
	k, err := kubelet.New(kubelet.Config{
		RESTConfig: cfg,
		StateDir:   stateDir,
		Nodes:      specs,
		Runner:     kubelet.NewProcessRouter(map[string]string{"cdplane": st.BinDir}),
	})
	if err != nil {
		return err
	}
	for _, n := range st.Nodes {
		path := filepath.Join(k.NodeDir(n.Name), NVMLSpecPath)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		data, err := json.Marshal(n.NVML)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	return k.Run(ctx)
}
