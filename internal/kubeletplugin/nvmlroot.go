package kubeletplugin

import (
	"cdplane/internal/driverroot"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/nvml"
)

// nvmlDiscoverer is the node's real NVML: the library --nvml-library names, or, by default,
// libnvidia-ml.so.1 found under the driver root and loaded by its full path. The plugin's image
// carries no driver library, and the loader's own search would look in the image, not on the
// host.
func (o *CommandOptions) nvmlDiscoverer() (nvml.Discoverer, error) {
	if o.NVMLLibrary != "" {
		return nvml.New(o.NVMLLibrary)
	}
	container := o.ContainerDriverRoot
	if container == "" {
		container = o.NvidiaDriverRoot
	}
	return devices.NewRootNVML(driverroot.Root{Host: o.NvidiaDriverRoot, Container: container}), nil
}
