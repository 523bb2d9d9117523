package nodehost

import (
	"fmt"
	"os"
	"path/filepath"

	"cdplane/internal/sim/imexsim"
)

// Device nodes of a simulated node, below its node directory.
const (
	// CtlDevicePath is the driver's control device.
	CtlDevicePath = imexsim.CtlDevicePath
	// IMEXMgmtDeviceDir holds the IMEX management device, nvidia-cap<IMEXMgmtMinor>.
	IMEXMgmtDeviceDir = imexsim.IMEXMgmtDeviceDir
)

// IMEXMgmtDevicePath is the IMEX management device whose minor WriteNode's capability file
// names.
var IMEXMgmtDevicePath = fmt.Sprintf("%s/nvidia-cap%d", IMEXMgmtDeviceDir, IMEXMgmtMinor)

// WriteDeviceNodes creates the simulated node's driver device nodes in nodeDir, the node's
// "/": /dev/nvidiactl and the IMEX management device, as empty files (creating a character
// device would need privileges a simulation should not). A container's simulated IMEX needs
// both in its view, which it gets through the daemon claim's CDI device nodes; a device node
// whose host file is missing is not in a container's view. Existing files are kept.
func WriteDeviceNodes(nodeDir string) error {
	for _, p := range []string{CtlDevicePath, IMEXMgmtDevicePath} {
		path := filepath.Join(nodeDir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("device node %s: %w", p, err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return fmt.Errorf("device node %s: %w", p, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("device node %s: %w", p, err)
		}
	}
	return nil
}
