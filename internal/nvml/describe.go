package nvml

import (
	"fmt"
	"strings"
)

// Describe writes what Discover returned for an operator: the backend, the
// GPU count, each GPU's UUID and raw fabric info, and the clique, or why the
// clique is not known when err is not nil.
func Describe(res Result, err error) string {
	var b strings.Builder
	if res.Backend != "" {
		fmt.Fprintf(&b, "Backend: %s\n", res.Backend)
	}
	fmt.Fprintf(&b, "GPUs: %d\n", len(res.GPUs))
	for _, gpu := range res.GPUs {
		fmt.Fprintf(&b, "  GPU %d  %s  fabric: %s\n", gpu.Index, gpu.UUID, describeFabric(gpu.Fabric))
	}
	switch {
	case err != nil:
		fmt.Fprintf(&b, "Clique: not known: %v\n", err)
	case res.CliqueID == "":
		b.WriteString("Clique: none (no NVLink fabric)\n")
	default:
		fmt.Fprintf(&b, "Clique: %s\n", res.CliqueID)
	}
	return b.String()
}

func describeFabric(f FabricInfo) string {
	if !f.Supported {
		return "not supported"
	}
	return fmt.Sprintf("state %s, status %s, clusterUUID %s, cliqueId %d",
		f.State, f.Status, FormatUUID(f.ClusterUUID), f.CliqueID)
}
