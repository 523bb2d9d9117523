package nvmlsim

import (
	"bytes"
	"fmt"
	"strconv"

	"cdplane/internal/nvml"
)

// ConfPath is where, below a simulated node's directory, the simulated NVML library reads the
// node's spec (RenderConf), at every nvmlInit.
const ConfPath = "/etc/cdplane/nvml-sim.conf"

// MaxGPUs is the most GPUs a simulated node has: the size of the simulated library's device
// table (a real node has at most a few dozen).
const MaxGPUs = 64

// maxConfLine is the longest line, without its newline, that the simulated library reads.
const maxConfLine = 1024

// conf is what the simulated NVML library answers: a node's raw NVML readings.
type conf struct {
	// Driver is the driver version (nvmlSystemGetDriverVersion).
	Driver string
	// Unavailable makes nvmlInit fail with NVML_ERROR_DRIVER_NOT_LOADED.
	Unavailable bool
	// GPUs are the readings of the node's GPUs, in index order; a GPU whose Fabric.Supported is
	// false answers NVML_ERROR_NOT_SUPPORTED for its fabric info.
	GPUs []nvml.GPU
}

// RenderConf renders a node's spec in the text format the simulated NVML library reads (its C
// source, libnvml/nvml_sim.c, describes the format): the driver version, whether NVML is
// unavailable, and each GPU's UUID and raw fabric reading, PerGPU resolved. The JSON spec
// (Parse) stays the simulator's record of the node; this is the library's view of it.
func RenderConf(s Node) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	c := conf{Driver: s.Driver(), Unavailable: s.Unavailable, GPUs: s.readings()}
	var b bytes.Buffer
	if q := strconv.QuoteToASCII(s.Node); s.Node != "" && len(q) <= 256 {
		fmt.Fprintf(&b, "# Simulated NVML of node %s (nvmlsim.RenderConf), read at every nvmlInit.\n", q)
	}
	b.Write(c.render())
	return b.Bytes(), nil
}

// render writes c in the library's format, without comments.
func (c conf) render() []byte {
	var b bytes.Buffer
	b.WriteString("nvml-sim 1\n")
	fmt.Fprintf(&b, "driver %s\n", c.Driver)
	if c.Unavailable {
		b.WriteString("unavailable\n")
	}
	fmt.Fprintf(&b, "gpus %d\n", len(c.GPUs))
	for i, g := range c.GPUs {
		fmt.Fprintf(&b, "gpu %d %s ", i, g.UUID)
		if !g.Fabric.Supported {
			b.WriteString("nofabric\n")
			continue
		}
		f := g.Fabric
		fmt.Fprintf(&b, "fabric %s %d %s %d\n", stateField(f.State), uint32(f.Status), nvml.FormatUUID(f.ClusterUUID), f.CliqueID)
	}
	return b.Bytes()
}

// stateField is a fabric state as the library reads it: NVML's name, or the number of a state
// that has none.
func stateField(s nvml.FabricState) string {
	if name, err := s.MarshalText(); err == nil {
		return string(name)
	}
	return strconv.Itoa(int(s))
}
